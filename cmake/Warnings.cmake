# Warnings are errors for our own code (STYLE.md principle 12).
set(TESSERA_WARNINGS -Wall -Wextra -Wpedantic -Wshadow=local -Wnon-virtual-dtor
    -Wimplicit-fallthrough -Wno-unused-parameter -Werror)
function(tessera_warnings target)
  target_compile_options(${target} PRIVATE ${TESSERA_WARNINGS})
endfunction()
