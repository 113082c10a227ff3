# Writes the file IN as a C++ raw string literal into OUT (cmake -P script),
# so a text resource (the Redis function library) is compiled into a binary.
file(READ "${IN}" content)
file(WRITE "${OUT}.tmp" "R\"tessera_embed(${content})tessera_embed\"\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
