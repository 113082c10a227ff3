# Warnings are errors for our own code (STYLE.md principle 12).
set(TESSERA_WARNINGS -Wall -Wextra -Wpedantic -Wshadow=local -Wnon-virtual-dtor
    -Wimplicit-fallthrough -Wno-unused-parameter -Werror
    # GCC 12 reports bogus -Wrestrict on std::string appends at -O2 (GCC bug 105329).
    -Wno-restrict)
function(tessera_warnings target)
  target_compile_options(${target} PRIVATE ${TESSERA_WARNINGS})
endfunction()
