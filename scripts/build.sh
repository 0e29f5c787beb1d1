#!/usr/bin/env bash
# Configures and builds llmk into build/ (or $LLMK_BUILD_DIR).
#   scripts/build.sh [--sanitize] [extra cmake args]
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${LLMK_BUILD_DIR:-build}
cmake_args=()
for a in "$@"; do
  case "$a" in
    # Sanitized: -O1 with line tables only (stack traces keep file:line) and
    # NDEBUG as in the release build (compiling with ASan at -O2 -g takes
    # about twice as long on two cores); no benchmarks or examples. The
    # libFuzzer harnesses (fuzz/, built by clang) come with it, and each
    # replays its seed corpus and mutates for 15 s under CTest (changing the
    # budget changes these arguments, so the stamp below reconfigures). One
    # CPU level, the build machine's (-march=native): the kernels' SIMD paths
    # this CPU runs are checked under the sanitizers, and the CPU plugins are
    # not compiled three times over at ASan's pace (the release build tests
    # every level the CPU has). No CUDA backend (LLMK_CUDA=OFF): nvcc's
    # objects carry no sanitizer, and without a GPU its host code only
    # reports "no device", which the release build tests. No CUDA simulation
    # either (LLMK_CUDASIM=OFF): the simulated kernels are compiled without
    # the sanitizers anyway (the simulation's own bounds and race checks
    # stand in), the release build runs every cudasim test, and what is given
    # up is ASan over the CUDA executor's host code, for CI's time limit (a
    # clean release build took 35 min on a 2-core Zen 3, 10% of it the
    # simulation's targets, whose 173 tests took 341 s of the release suite
    # before the sanitizers slow them).
    --sanitize) build_dir=${LLMK_BUILD_DIR:-build-sanitize}
                cmake_args+=(-DLLMK_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1 -DNDEBUG"
                             -DLLMK_BUILD_BENCH=OFF -DLLMK_BUILD_EXAMPLES=OFF -DLLMK_FUZZ=ON -DLLMK_FUZZ_SECONDS=15
                             -DLLMK_CPU_DISPATCH=OFF -DLLMK_CUDA=OFF -DLLMK_CUDASIM=OFF) ;;
    *) cmake_args+=("$a") ;;
  esac
done

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# Configure when the folder has never been configured, when a configure
# failed part-way (a cache but no generated build files), or when the
# arguments differ from the last successful configure; otherwise the build
# step reruns CMake itself if a CMakeLists.txt changed.
stamp="$build_dir/.llmk-configure-args"
wanted="${cmake_args[*]}"
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" "${generator[@]}" "${cmake_args[@]}"
elif [ ! -f "$build_dir/build.ninja" ] && [ ! -f "$build_dir/Makefile" ] \
     || [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  cmake -S . -B "$build_dir" "${cmake_args[@]}"
fi
echo "$wanted" > "$stamp"
cmake --build "$build_dir" -j "$(nproc)"
echo "$build_dir"
