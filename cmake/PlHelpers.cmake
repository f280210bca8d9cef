# SPDX-License-Identifier: MIT
# Build helpers shared by every module: warning flags, hardening, sanitizers and the
# one function that registers a test (STYLE.md §13).

set(PL_WARNING_FLAGS
    -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2
    -Wswitch-enum -Wcast-align -Wno-unused-parameter)
if(CMAKE_C_COMPILER_ID STREQUAL "GNU")
    # snprintf into fixed buffers truncates on purpose (messages are capped); gcc's check
    # fires at -O0 and would force dead length arithmetic everywhere. (clang has no such flag.)
    list(APPEND PL_WARNING_FLAGS -Wno-format-truncation)
endif()

# pl_target_defaults(TARGET): warnings, C11, hidden visibility.
function(pl_target_defaults tgt)
    target_compile_options(${tgt} PRIVATE ${PL_WARNING_FLAGS})
    if(PL_WERROR)
        target_compile_options(${tgt} PRIVATE -Werror)
    endif()
    set_target_properties(${tgt} PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON
                                            C_EXTENSIONS OFF C_VISIBILITY_PRESET hidden)
endfunction()

# pl_add_test(NAME name SOURCES a.c b.c LIBS libs... [LABELS l...] [TIMEOUT s] [ENV k=v...])
# One CMocka binary per call, registered with CTest; exit code 77 means "skipped".
function(pl_add_test)
    cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS;ENV;ARGS" ${ARGN})
    add_executable(${T_NAME} ${T_SOURCES})
    pl_target_defaults(${T_NAME})
    target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} PkgConfig::CMOCKA)
    target_compile_definitions(${T_NAME} PRIVATE
        PL_SOURCE_DIR="${PROJECT_SOURCE_DIR}" PL_BINARY_DIR="${PROJECT_BINARY_DIR}")
    add_test(NAME ${T_NAME} COMMAND ${T_NAME} ${T_ARGS})
    if(NOT T_TIMEOUT)
        set(T_TIMEOUT 600)
    endif()
    if(NOT T_LABELS)
        set(T_LABELS unit)
    endif()
    # Sanitizer builds run several times slower: tests stretch their latency deadlines by
    # PICOLM_TEST_TIME_SCALE (1 when unset), so Release keeps the real figures.
    set(_pl_scale "")
    if(PL_SANITIZE)
        set(_pl_scale "PICOLM_TEST_TIME_SCALE=5;")
    endif()
    set_tests_properties(${T_NAME} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT ${T_TIMEOUT}
        LABELS "${T_LABELS}"
        ENVIRONMENT "PICOLM_TEST_DATA=${PICOLM_TEST_DATA};${_pl_scale}${T_ENV}")
endfunction()
