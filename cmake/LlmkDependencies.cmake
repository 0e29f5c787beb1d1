# Every third-party dependency, found once, exposed as an imported target.
# scripts/setup.sh installs all of them from Debian packages.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)

# CAF 0.17 ships neither a CMake config nor a .pc file.
find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
find_library(CAF_IO_LIBRARY caf_io REQUIRED)
if(NOT TARGET llmk::caf)
  add_library(llmk::caf INTERFACE IMPORTED)
  set_target_properties(llmk::caf PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${CAF_CORE_LIBRARY};${CAF_IO_LIBRARY};Threads::Threads")
endif()

# Boost.DLL is header-only with std::filesystem.
find_package(Boost 1.74 REQUIRED)
if(NOT TARGET llmk::boost_dll)
  add_library(llmk::boost_dll INTERFACE IMPORTED)
  set_target_properties(llmk::boost_dll PROPERTIES
    INTERFACE_LINK_LIBRARIES "Boost::headers;${CMAKE_DL_LIBS}"
    INTERFACE_COMPILE_DEFINITIONS "BOOST_DLL_USE_STD_FS")
endif()

find_package(cppzmq REQUIRED)
# KV-cache events are msgpack batches (ipc/kv_event_publisher.cpp); the
# Debian package's config is named msgpack, its target msgpackc-cxx.
find_package(msgpack 4 REQUIRED CONFIG)
pkg_check_modules(SPM REQUIRED IMPORTED_TARGET sentencepiece)
# tokenizer.json: Unicode regexes of pre-tokenizers (PCRE2) and Unicode
# normalizers such as Qwen2's NFC (ICU; without it such files are refused).
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(ICU_UC IMPORTED_TARGET icu-uc)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
# TLS of the HTTP server (Boost.Asio's ssl over OpenSSL, libssl-dev).
find_package(OpenSSL REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(CLI11 REQUIRED)
find_package(spdlog REQUIRED)
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_path(OPENBLAS_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas REQUIRED)
find_package(dnnl REQUIRED)
# OpenMPI (Debian's libopenmpi-dev): the comm.mpi plugin, and the CUDA
# simulation's NCCL, which carries its collectives between processes over MPI.
# Only those link it; llmk_core and the programs do not. MPIEXEC_EXECUTABLE
# (mpirun) runs the multi-process tests.
find_package(MPI REQUIRED COMPONENTS C)
find_path(CONCURRENTQUEUE_INCLUDE_DIR concurrentqueue/concurrentqueue.h REQUIRED)
if(NOT TARGET llmk::concurrentqueue)
  add_library(llmk::concurrentqueue INTERFACE IMPORTED)
  set_target_properties(llmk::concurrentqueue PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CONCURRENTQUEUE_INCLUDE_DIR}")
endif()
# Structured outputs: XGrammar's static core, optional (LLMK_HAVE_XGRAMMAR).
include(${CMAKE_CURRENT_LIST_DIR}/LlmkXGrammar.cmake)
if(LLMK_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
  include(Catch)
endif()
