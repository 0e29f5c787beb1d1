# Warnings and sanitizers for llmk's own targets (never for dependencies).
add_library(llmk_warnings INTERFACE)
target_compile_options(llmk_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-unused-parameter>)

# CPU code generation. On x86-64 the build is portable by default: every
# program and library targets x86-64-v3 (AVX2, FMA, F16C), and the CPU plugins
# are built once more for each higher level in LLMK_CPU_VARIANTS, as
# libllmk_<name>.<level>.so beside the baseline file. The plugin loader picks
# the highest level the CPU runs (core/cpu_isa.hpp). LLMK_CPU_DISPATCH=OFF
# builds everything once, for the build machine's CPU (-march=native).
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  option(LLMK_CPU_DISPATCH "x86-64-v3 baseline plus CPU plugins per instruction-set level, chosen at run time" ON)
else()
  set(LLMK_CPU_DISPATCH OFF)
endif()
if(LLMK_CPU_DISPATCH)
  set(LLMK_CPU_BASELINE_FLAGS -march=x86-64-v3)
  set(LLMK_CPU_BASELINE_NAME "x86-64-v3: AVX2, FMA, F16C")
  # Highest first; core/cpu_isa.cpp lists the CPU features each one needs.
  set(LLMK_CPU_VARIANTS avx512bf16 avx512)
  set(LLMK_CPU_FLAGS_avx512bf16 -march=x86-64-v4 -mavx512bf16 -mavx512vnni)
  set(LLMK_CPU_FLAGS_avx512 -march=x86-64-v4)
else()
  set(LLMK_CPU_BASELINE_FLAGS -march=native)
  set(LLMK_CPU_BASELINE_NAME "-march=native, for the CPU it was built on")
  set(LLMK_CPU_VARIANTS "")
endif()
add_library(llmk_arch INTERFACE)
target_compile_options(llmk_arch INTERFACE $<$<COMPILE_LANGUAGE:CXX>:${LLMK_CPU_BASELINE_FLAGS}>)
foreach(level ${LLMK_CPU_VARIANTS})
  add_library(llmk_arch_${level} INTERFACE)
  target_compile_options(llmk_arch_${level} INTERFACE $<$<COMPILE_LANGUAGE:CXX>:${LLMK_CPU_FLAGS_${level}}>)
endforeach()

if(LLMK_SANITIZE)
  # scripts/test.sh stops at the first report (halt_on_error=1).
  add_compile_options(-fsanitize=${LLMK_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${LLMK_SANITIZE})
endif()

# Helper: add an llmk plugin shared library that lands in the plugin directory.
#   llmk_add_plugin(<target> NAME <attention.cpu> SOURCES ... [LIBS ...] [CPU_VARIANTS])
# The library file is libllmk_<name with dots as underscores>.so. CPU_VARIANTS
# builds it once more per level of LLMK_CPU_VARIANTS (target <target>_<level>,
# file libllmk_<stem>.<level>.so), each linking that level's kernels in place
# of llmk_kernels_cpu.
function(llmk_add_plugin target)
  cmake_parse_arguments(P "CPU_VARIANTS" "NAME" "SOURCES;LIBS" ${ARGN})
  string(REPLACE "." "_" file_stem "${P_NAME}")
  llmk_add_plugin_library(${target} "llmk_${file_stem}" llmk_arch "${P_SOURCES}" "${P_LIBS}")
  if(P_CPU_VARIANTS)
    foreach(level ${LLMK_CPU_VARIANTS})
      list(TRANSFORM P_LIBS REPLACE "^llmk_kernels_cpu$" "llmk_kernels_cpu_${level}" OUTPUT_VARIABLE level_libs)
      llmk_add_plugin_library(${target}_${level} "llmk_${file_stem}.${level}" llmk_arch_${level}
        "${P_SOURCES}" "${level_libs}")
    endforeach()
  endif()
endfunction()

function(llmk_add_plugin_library target output_name arch sources libs)
  add_library(${target} MODULE ${sources})
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME "${output_name}"
    PREFIX "lib"
    LIBRARY_OUTPUT_DIRECTORY ${LLMK_PLUGIN_BUILD_DIR}
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  # Real unloading: no STB_GNU_UNIQUE symbols that pin the library in memory.
  target_compile_options(${target} PRIVATE -fno-gnu-unique)
  target_link_libraries(${target} PRIVATE llmk_plugin_api llmk_warnings ${arch} ${libs})
  install(TARGETS ${target} LIBRARY DESTINATION ${LLMK_PLUGIN_INSTALL_DIR})
  set_property(GLOBAL APPEND PROPERTY LLMK_PLUGIN_TARGETS ${target})
endfunction()

# Test programs compile their sources in batches (CMake's unity build): a
# batch parses Catch2, nlohmann/json and the engine's headers, and
# instantiates their templates, once for all its files. Test sources are most
# of both builds' translation units, and CI builds twice on two cores.
# Compiled alone: sources from outside tests/ (engine code some test programs
# compile in), tests/support/, and the test files below, whose file-local
# helpers share a name with another file of the same program.
option(LLMK_UNITY_TESTS "Compile each test program's sources in batches (unity build)" ON)
set(LLMK_UNITY_TEST_BATCH 8 CACHE STRING "Test sources per unity batch")
set(LLMK_UNITY_TEST_SOLO
  test_speculative_sampled_draft.cpp test_tokenizer.cpp test_speculation_tree.cpp test_scheduler_plugins.cpp
  test_model_architectures.cpp test_executor.cpp test_compressed_tensors_checkpoint.cpp test_detokenizer.cpp
  test_zmq_server.cpp test_embeddings_serve.cpp test_spqr_outliers.cpp test_weight_only.cpp test_streams.cpp
  test_cuda_executor_stream.cpp test_attention_paged.cpp test_speculative_medusa.cpp test_speculation.cpp
  test_gguf_model.cpp test_wmma.cpp test_attention_flash.cpp test_speculation_q.cpp)
function(llmk_unity_tests target)
  if(NOT LLMK_UNITY_TESTS)
    return()
  endif()
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE BATCH
    UNITY_BUILD_BATCH_SIZE ${LLMK_UNITY_TEST_BATCH})
  get_target_property(sources ${target} SOURCES)
  foreach(src ${sources})
    get_filename_component(path "${src}" ABSOLUTE)
    get_filename_component(name "${src}" NAME)
    string(FIND "${path}" "${PROJECT_SOURCE_DIR}/tests/" in_tests)
    string(FIND "${path}" "${PROJECT_SOURCE_DIR}/tests/support/" in_support)
    if(NOT in_tests EQUAL 0 OR in_support EQUAL 0 OR name IN_LIST LLMK_UNITY_TEST_SOLO)
      set_source_files_properties(${src} TARGET_DIRECTORY ${target} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endforeach()
endfunction()
