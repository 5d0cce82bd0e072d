# mfsdp_gtest_suites(TARGET [LABELS label] [TIMEOUT seconds]): one ctest test per GoogleTest
# suite of TARGET, named "Suite.*" and run as `TARGET --gtest_filter=Suite.*` in one process,
# instead of gtest_discover_tests' one process per test. For the suites that link LibTorch:
# loading it costs each process about half a second of CPU, more than most of their tests
# take (the planner's 166 tests run in 3.5 s in one process, in about 100 s one per process).
# The suites are listed after every link of TARGET, as gtest_discover_tests lists tests, so
# ctest sees a new suite without re-configuring. A failing suite's output names the failing
# tests; run one test alone with `TARGET --gtest_filter=Suite.Test` (docs/ci.md).
set(MFSDP_GTEST_SUITES_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/gtest_suites_script.cmake)

function(mfsdp_gtest_suites target)
  cmake_parse_arguments(arg "" "LABELS;TIMEOUT" "" ${ARGN})
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 1500)  # ctest's default
  endif()
  set(tests_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake)
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -DEXECUTABLE=$<TARGET_FILE:${target}>
            -DWORKING_DIRECTORY=${CMAKE_CURRENT_BINARY_DIR} -DOUTPUT=${tests_file}
            -DLABELS=${arg_LABELS} -DTIMEOUT=${arg_TIMEOUT} -P ${MFSDP_GTEST_SUITES_SCRIPT}
    BYPRODUCTS ${tests_file}
    VERBATIM)
  # A build that skipped TARGET (scripts/sanitize builds three suites) has no tests file: ctest
  # then lists one failing TARGET_NOT_BUILT test, without labels, as gtest_discover_tests does.
  set(include_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_include.cmake)
  file(WRITE ${include_file}
    "if(EXISTS [==[${tests_file}]==])\n"
    "  include([==[${tests_file}]==])\n"
    "else()\n"
    "  add_test([==[${target}_NOT_BUILT]==] [==[${target}_NOT_BUILT]==])\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include_file})
endfunction()
