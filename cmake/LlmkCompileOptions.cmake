# Warnings and sanitizers for llmk's own targets (never for dependencies).
add_library(llmk_warnings INTERFACE)
target_compile_options(llmk_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-unused-parameter>)

add_library(llmk_arch INTERFACE)
# The CPU kernels are written for AVX2/AVX-512 with runtime-independent code:
# build for the machine we run on unless a distributable build is asked for.
option(LLMK_NATIVE "Compile for the build machine's CPU (-march=native)" ON)
if(LLMK_NATIVE)
  target_compile_options(llmk_arch INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()

if(LLMK_SANITIZE)
  # scripts/test.sh stops at the first report (halt_on_error=1).
  add_compile_options(-fsanitize=${LLMK_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${LLMK_SANITIZE})
endif()

# Helper: add an llmk plugin shared library that lands in the plugin directory.
#   llmk_add_plugin(<target> NAME <attention.cpu> SOURCES ... [LIBS ...])
# The library file is libllmk_<name with dots as underscores>.so.
function(llmk_add_plugin target)
  cmake_parse_arguments(P "" "NAME" "SOURCES;LIBS" ${ARGN})
  string(REPLACE "." "_" file_stem "${P_NAME}")
  add_library(${target} MODULE ${P_SOURCES})
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME "llmk_${file_stem}"
    PREFIX "lib"
    LIBRARY_OUTPUT_DIRECTORY ${LLMK_PLUGIN_BUILD_DIR}
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  # Real unloading: no STB_GNU_UNIQUE symbols that pin the library in memory.
  target_compile_options(${target} PRIVATE -fno-gnu-unique)
  target_link_libraries(${target} PRIVATE llmk_plugin_api llmk_warnings llmk_arch ${P_LIBS})
  install(TARGETS ${target} LIBRARY DESTINATION ${LLMK_PLUGIN_INSTALL_DIR})
  set_property(GLOBAL APPEND PROPERTY LLMK_PLUGIN_TARGETS ${target})
endfunction()
