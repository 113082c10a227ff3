# Writes the files IN (separated by '|', concatenated in order) as a C++ raw string
# literal into OUT (cmake -P script), so a text resource (the Redis function
# library) is compiled into a binary.
set(content "")
string(REPLACE "|" ";" parts "${IN}")
foreach(part IN LISTS parts)
  file(READ "${part}" text)
  string(APPEND content "${text}")
endforeach()
file(WRITE "${OUT}.tmp" "R\"tessera_embed(${content})tessera_embed\"\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
