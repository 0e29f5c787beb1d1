# cmake "-DREASON=..." -P unless_sanitized.cmake -- COMMAND ARGS...
#
# Runs COMMAND (its output passes through, its exit status is this
# script's), except in the sanitized suite (scripts/test.sh sets
# LLMK_TEST_SANITIZED), where it prints "SKIPPED: " and REASON: the test is
# left to the release build because a smaller run of the same code is
# sanitized elsewhere, and REASON says which. Register the test with
# SKIP_REGULAR_EXPRESSION "SKIPPED:" so CTest counts it as skipped.
# Arguments must not contain ';' (CMake would split them).
if(DEFINED ENV{LLMK_TEST_SANITIZED})
  message("SKIPPED: left to the release build under the sanitizers: ${REASON}")
  return()
endif()
set(command "")
set(after_separator OFF)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(after_separator)
    list(APPEND command "${CMAKE_ARGV${i}}")
  elseif("${CMAKE_ARGV${i}}" STREQUAL "--")
    set(after_separator ON)
  endif()
endforeach()
list(LENGTH command length)
if(length EQUAL 0)
  message(FATAL_ERROR "unless_sanitized.cmake: no command after --")
endif()
execute_process(COMMAND ${command} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${command} exited ${rc}")
endif()
