# -DTESSERA_SANITIZE=address  -> ASan + UBSan
# -DTESSERA_SANITIZE=thread   -> TSan
if(TESSERA_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  # Linked as position-dependent executables: at -O0, UBSan's source
  # locations and ASan's global descriptors are ~2 million pointers in .data,
  # and a PIE relocates every one at each start (23k page faults, 0.36 s for
  # `tessera --help` on a PVM guest; 9.7k and 0.22 s without). The test suites
  # start the binary hundreds of times. Code compiled as PIE links fine so.
  add_link_options(-fsanitize=address,undefined -no-pie)
elseif(TESSERA_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT TESSERA_SANITIZE STREQUAL "")
  message(FATAL_ERROR "unknown TESSERA_SANITIZE=${TESSERA_SANITIZE}")
endif()
