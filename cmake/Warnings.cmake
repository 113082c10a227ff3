# Warnings are errors for our own code (STYLE.md principle 12).
# -Winvalid-pch: a precompiled header shared between targets (src/ and tests/
# CMakeLists.txt) that a target cannot use fails its build instead of
# silently costing the parse it was meant to save.
set(TESSERA_WARNINGS -Wall -Wextra -Wpedantic -Wshadow=local -Wnon-virtual-dtor
    -Wimplicit-fallthrough -Wno-unused-parameter -Winvalid-pch -Werror
    # GCC 12 reports bogus -Wrestrict on std::string appends at -O2 (GCC bug 105329).
    -Wno-restrict)
function(tessera_warnings target)
  target_compile_options(${target} PRIVATE ${TESSERA_WARNINGS})
endfunction()
