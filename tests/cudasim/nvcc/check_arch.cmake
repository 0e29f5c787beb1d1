# cmake -DOBJECTS=a.o;b.o -DARCHES=sm_80;sm_90a -P check_arch.cmake
# Fails unless every object's embedded fatbin names every architecture (there
# is no cuobjdump on machines without a GPU driver; the fatbin names its
# targets as text).
string(REPLACE "\\;" ";" OBJECTS "${OBJECTS}")
string(REPLACE "\\;" ";" ARCHES "${ARCHES}")
if(NOT OBJECTS)
  message(FATAL_ERROR "no objects given")
endif()
foreach(object ${OBJECTS})
  if(NOT EXISTS "${object}")
    message(FATAL_ERROR "${object} is missing: build the target llmk_cudasim_kernels_nvcc first")
  endif()
  foreach(arch ${ARCHES})
    file(STRINGS "${object}" hits REGEX "${arch}([^0-9a-z]|$)" LIMIT_COUNT 1)
    if(NOT hits)
      message(FATAL_ERROR "${object} carries no ${arch} code")
    endif()
  endforeach()
  message(STATUS "${object}: ${ARCHES}")
endforeach()
