# -DTESSERA_SANITIZE=address  -> ASan + UBSan
# -DTESSERA_SANITIZE=thread   -> TSan
if(TESSERA_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(TESSERA_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT TESSERA_SANITIZE STREQUAL "")
  message(FATAL_ERROR "unknown TESSERA_SANITIZE=${TESSERA_SANITIZE}")
endif()
