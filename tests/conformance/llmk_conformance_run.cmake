# Runs `llmk plugins --conformance FILE` and checks its exit status and
# output: cmake -DLLMK=... -DFILE=... -DEXPECT_FAIL=ON|OFF -DEXPECT_REGEX=...
#   [-DSKIP_SANITIZED=ON [-DSKIP_REASON=...]] -P this
# SKIP_SANITIZED: a run whose code the sanitized suite already checks
# elsewhere (SKIP_REASON says where) is left to the release build.
if(SKIP_SANITIZED AND DEFINED ENV{LLMK_TEST_SANITIZED})
  if(NOT SKIP_REASON)
    set(SKIP_REASON "the simulated-device grid runs in the release build; test_cudasim sanitizes the simulated kernels")
  endif()
  message("SKIPPED: ${SKIP_REASON}")
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
