# mpirun -np 2 llmk generate on the CUDA executor at tensor 2: rank 1 must
# build its CUDA shard (serve_parallel_steps through the CUDA backend). With
# a GPU the command generates; without one the ranks agree on who has no
# device (one collective in the CUDA executor, before its first) and the
# error names rank 1 whichever rank prints it. A worker that never
# registered the CUDA backend says instead that the build has no tensor
# parallelism for cuda, and never reaches that collective: the failure this
# catches.
#   cmake -DMPIRUN="mpirun;args" -DLLMK=... -DMODEL=... -P cuda_worker_rank.cmake
execute_process(COMMAND ${MPIRUN} -np 2 ${LLMK} generate --model ${MODEL} --prompt Once --max-tokens 4
  --set parallel.tensor=2 --set executor.device=cuda --set plugins.linear=linear.cublas
  --set plugins.attention=attention.cuda
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
set(all "${out}${err}")
if(all MATCHES "no tensor or pipeline parallelism in this build")
  message(FATAL_ERROR "a worker rank has no CUDA backend:\n${all}")
endif()
if(rc EQUAL 0)
  message(STATUS "generated on the GPU at tensor 2")
elseif(all MATCHES "no CUDA device is visible to [^\n]*rank 1 \\(cudaGetDeviceCount")
  message(STATUS "no GPU: rank 1 reached the CUDA executor and named the missing device")
else()
  message(FATAL_ERROR "exit ${rc}, neither a generation nor rank 1 naming the missing device:\n${all}")
endif()
