# Runs `llmk plugins --conformance FILE` and checks its exit status and
# output: cmake -DLLMK=... -DFILE=... -DEXPECT_FAIL=ON|OFF -DEXPECT_REGEX=... [-DSKIP_SANITIZED=ON] -P this
# SKIP_SANITIZED: a run too slow under the sanitizers (the whole grid on the
# simulated device) is left to the release build; the simulated kernels are
# checked under the sanitizers by test_cudasim.
if(SKIP_SANITIZED AND DEFINED ENV{LLMK_TEST_SANITIZED})
  message("SKIPPED: the simulated-device grid runs in the release build")
  return()
endif()
execute_process(COMMAND ${LLMK} plugins --conformance ${FILE}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(EXPECT_FAIL AND rc EQUAL 0)
  message(FATAL_ERROR "llmk plugins --conformance ${FILE} exited 0; a failure was expected")
elseif(NOT EXPECT_FAIL AND NOT rc EQUAL 0)
  message(FATAL_ERROR "llmk plugins --conformance ${FILE} exited ${rc}; a pass was expected")
endif()
if(NOT out MATCHES "${EXPECT_REGEX}")
  message(FATAL_ERROR "the output does not match '${EXPECT_REGEX}'")
endif()
