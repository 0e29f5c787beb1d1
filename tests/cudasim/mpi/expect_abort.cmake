# Runs `MPIRUN -np 2 PROGRAM --abort` (MPIRUN: mpirun and its options, a list) and passes when the job ends with the
# code the program's abort() passed (mpirun exits with MPI_Abort's code) and
# no rank went on after it:
#   cmake -DMPIRUN=... -DPROGRAM=... -DCODE=3 -P expect_abort.cmake
execute_process(COMMAND ${MPIRUN} -np 2 ${PROGRAM} --abort
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 50)
message("${out}${err}")
if(NOT rc STREQUAL "${CODE}")
  message(FATAL_ERROR "mpirun exited with '${rc}', want the abort code ${CODE}")
endif()
if("${out}${err}" MATCHES "still running")
  message(FATAL_ERROR "a rank went on after another rank's abort")
endif()
