# cmake -P script: install the build tree to WORK_DIR/prefix, configure and
# build examples/out_of_tree against it, run it on MODEL_DIR.
if(DEFINED ENV{LLMK_TEST_SANITIZED})
  message("SKIPPED: sanitized builds do not test the installed package")
  return()
endif()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f include/llmk/actors/engine.hpp include/llmk/core/request.hpp lib/cmake/llmk/llmkConfig.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "the installation lacks ${f}")
  endif()
endforeach()
file(GLOB plugins ${prefix}/lib/llmk/plugins/libllmk_*.so)
if(NOT plugins)
  message(FATAL_ERROR "the installation has no plugins under lib/llmk/plugins")
endif()

run("configure the out-of-tree example" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/out_of_tree
    -B ${WORK_DIR}/build -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${COMPILER}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run("build the out-of-tree example" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
# Plugins come from the installation only.
set(ENV{LLMK_PLUGIN_PATH} ${prefix}/lib/llmk/plugins)
run("run the out-of-tree example" ${WORK_DIR}/build/llmk_hello ${MODEL_DIR})
if(NOT last_output MATCHES "Once upon a time.+\\[finish: length\\]")
  message(FATAL_ERROR "unexpected output of llmk_hello:\n${last_output}")
endif()
message("${last_output}")
