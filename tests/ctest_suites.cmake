# One ctest test per gtest suite of a test binary. Run by ctest itself (the include file that
# cube3d_layer_tests in tests/CMakeLists.txt adds to TEST_INCLUDE_FILES), not by the configure
# step: the binary lists its own tests (--gtest_list_tests) whenever it is newer than the last
# listing, so every suite it holds gets a test and no source is parsed. A test per suite rather
# than per case: most binaries link libtorch, whose load (~0.3 s) would otherwise be paid by
# every case. Reads:
#   cube3d_suites_executable   the test binary
#   cube3d_suites_ctest_file   the file to write the add_test() calls to (then included)
#   cube3d_suites_working_dir  where the tests run
#   cube3d_suites_prefix       test names are <prefix><suite>, e.g. model.ClipTokenizerTest
#   cube3d_suites_properties   properties of every test (TIMEOUT 600)
#   cube3d_suites_fixture_filter, cube3d_suites_fixture_properties: a suite with a case that the
#     gtest filter matches also gets these properties (e.g. FIXTURES_REQUIRED)
#   cube3d_suites_discovery_timeout  seconds for one listing
#
# A suite is the name in TEST/TEST_F/TEST_P/TYPED_TEST(Suite, ...): its test runs the binary with
# --gtest_filter listing exactly the suites gtest printed for it ("Suite", TYPED_TEST's
# "Suite/0", "Suite/1", TEST_P's "Prefix/Suite", TYPED_TEST_P's "Prefix/Suite/0"), so no case
# runs twice and none is left out. The test fails when the filter runs no case (gtest 1.12 exits
# 0 then and has no flag against it), is skipped only when every case it ran was skipped (a
# plain "[  SKIPPED ]" match would hide a failing case beside a skipped one), and is disabled
# when all its cases are DISABLED_.

# ctest includes this file with its default (old) policies: IN_LIST needs CMP0057.
cmake_policy(PUSH)
cmake_policy(VERSION 3.20)

# Full names (<printed suite>.<case>) of the cases that `executable --gtest_list_tests [filter]`
# prints, into out_var; typed suites (TYPED_TEST, TYPED_TEST_P) into typed_var.
function(cube3d_suites_list out_var typed_var filter)
  set(args --gtest_list_tests)
  if(NOT filter STREQUAL "")
    list(APPEND args "--gtest_filter=${filter}")
  endif()
  execute_process(COMMAND "${cube3d_suites_executable}" ${args}
    WORKING_DIRECTORY "${cube3d_suites_working_dir}"
    TIMEOUT ${cube3d_suites_discovery_timeout}
    OUTPUT_VARIABLE output ERROR_VARIABLE error RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "Listing the tests of ${cube3d_suites_executable} failed (${result}):\n"
      "${output}${error}")
  endif()
  # Parameter values and type names (after " # ") may hold anything: no list separators.
  foreach(special "\\" ";" "[" "]")
    string(REPLACE "${special}" "_" output "${output}")
  endforeach()
  string(REPLACE "\n" ";" lines "${output}")
  set(names "")
  set(typed "")
  set(suite "")
  foreach(line IN LISTS lines)
    # (Every group participates: CMAKE_MATCH_<n> of one that does not keeps an older value.)
    if(line MATCHES "^  +([^ #]+)(.*)$")
      if(NOT suite STREQUAL "")
        list(APPEND names "${suite}.${CMAKE_MATCH_1}")
      endif()
    elseif(line MATCHES "^([^ #]+)\\.(.*)$")
      set(suite "${CMAKE_MATCH_1}")
      if(CMAKE_MATCH_2 MATCHES "^ +# TypeParam = ")
        list(APPEND typed "${suite}")
      endif()
    else()
      set(suite "")  # "Running main() from gtest_main.cc"
    endif()
  endforeach()
  set(${out_var} "${names}" PARENT_SCOPE)
  set(${typed_var} "${typed}" PARENT_SCOPE)
endfunction()

# Each argument as a bracket argument, joined by spaces.
function(cube3d_suites_quote out_var)
  set(quoted "")
  foreach(arg IN LISTS ARGN)
    string(APPEND quoted " [==[${arg}]==]")
  endforeach()
  set(${out_var} "${quoted}" PARENT_SCOPE)
endfunction()

function(cube3d_suites_discover)
  cube3d_suites_list(names typed "")
  set(fixture_names "")
  if(NOT cube3d_suites_fixture_filter STREQUAL "")
    cube3d_suites_list(fixture_names unused "${cube3d_suites_fixture_filter}")
  endif()

  # Group the printed suites by the suite name in the source.
  set(groups "")
  foreach(name IN LISTS names)
    string(REGEX REPLACE "\\.[^.]*$" "" printed "${name}")
    string(REGEX REPLACE "^.*\\." "" case "${name}")
    string(REPLACE "/" ";" parts "${printed}")
    list(LENGTH parts length)
    if(printed IN_LIST typed AND length GREATER 1)
      list(REMOVE_AT parts -1)  # the type's index (or name)
    endif()
    list(GET parts -1 group)  # without TEST_P's / TYPED_TEST_P's instantiation prefix
    if(NOT group IN_LIST groups)
      list(APPEND groups "${group}")
      set(group_${group}_suites "")
      set(group_${group}_enabled 0)
      set(group_${group}_fixture FALSE)
    endif()
    if(NOT printed IN_LIST group_${group}_suites)
      list(APPEND group_${group}_suites "${printed}")
    endif()
    # gtest's own rule: a suite or case named DISABLED_* or */DISABLED_*.
    if(NOT printed MATCHES "(^|/)DISABLED_" AND NOT case MATCHES "(^|/)DISABLED_")
      math(EXPR group_${group}_enabled "${group_${group}_enabled} + 1")
    endif()
    if(name IN_LIST fixture_names)
      set(group_${group}_fixture TRUE)
    endif()
  endforeach()

  set(script "")
  foreach(group IN LISTS groups)
    set(test_name "${cube3d_suites_prefix}${group}")
    list(TRANSFORM group_${group}_suites APPEND ".*" OUTPUT_VARIABLE patterns)
    list(JOIN patterns ":" filter)
    set(command "${cube3d_suites_executable}" "--gtest_filter=${filter}")
    set(enabled ${group_${group}_enabled})
    set(properties WORKING_DIRECTORY "${cube3d_suites_working_dir}" ${cube3d_suites_properties})
    if(enabled EQUAL 0)
      # Like gtest_discover_tests: listed, never run by ctest.
      list(APPEND command --gtest_also_run_disabled_tests)
      list(APPEND properties DISABLED TRUE)
    else()
      if(enabled EQUAL 1)
        set(count "1 test")
      else()
        set(count "${enabled} tests")
      endif()
      # (With GTEST_COLOR=yes a colour reset, ESC [ m, follows the bracket; "." for its "[",
      # which would join list elements here.)
      string(ASCII 27 escape)
      list(APPEND properties
        FAIL_REGULAR_EXPRESSION "[^0-9]0 tests from 0 test suites ran\\."
        SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\] (${escape}.m)?${count}, listed below")
    endif()
    if(group_${group}_fixture)
      list(APPEND properties ${cube3d_suites_fixture_properties})
    endif()
    cube3d_suites_quote(quoted_name "${test_name}")
    cube3d_suites_quote(quoted_command ${command})
    cube3d_suites_quote(quoted_properties ${properties})
    string(APPEND script "add_test(${quoted_name}${quoted_command})\n"
      "set_tests_properties(${quoted_name} PROPERTIES${quoted_properties})\n")
  endforeach()
  file(WRITE "${cube3d_suites_ctest_file}" "${script}")
endfunction()

cube3d_suites_discover()
cmake_policy(POP)
