#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test.
#   scripts/test.sh              release build, all tests, then the sanitizer build and its tests
#   scripts/test.sh --fast       release build and tests only
#   scripts/test.sh --sanitize   AddressSanitizer + UndefinedBehaviorSanitizer build and tests only
set -euo pipefail
cd "$(dirname "$0")/.."

mode=all
case "${1:-}" in
  --fast) mode=fast ;;
  --sanitize) mode=sanitize ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--fast|--sanitize]" >&2; exit 2 ;;
esac

start=$SECONDS
phases=()
phase_done() { phases+=("$1 $((SECONDS - start)) s"); start=$SECONDS; }
# Each phase's time is printed when every phase has passed (CI shows the end
# of the output).
report() { printf 'test.sh: %s\n' "${phases[*]/%/,}" | sed 's/,$//'; }

scripts/setup.sh
phase_done setup
jobs=$(nproc)

run_suite() {
  local dir=$1
  # Sanitized runs stop at the first report, leaks included: LeakSanitizer
  # is on, with suppressions for third-party libraries only, each explained
  # (tests/lsan.supp). MPI ranks started by mpirun unwind each allocation in
  # full (Open MPI's mca_base_env_list hands them their own LSAN_OPTIONS):
  # Open MPI unloads the components it opened and rejected in MPI_Init, and
  # the fast frame-pointer stack of an allocation made there names no
  # library a suppression could match. Everything else keeps the fast
  # unwinder (full stacks everywhere cost about 3x the time).
  local lsan="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
  LSAN_OPTIONS=${LSAN_OPTIONS:-$lsan} \
  OMPI_MCA_mca_base_env_list=${OMPI_MCA_mca_base_env_list:-LSAN_OPTIONS=$lsan:fast_unwind_on_malloc=0} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    ctest --test-dir "$dir" --output-on-failure -j "$jobs" --timeout 600
}

if [ "$mode" != sanitize ]; then
  LLMK_BUILD_DIR=build scripts/build.sh
  phase_done "release build"
  run_suite build
  phase_done "release suite"
fi
if [ "$mode" != fast ]; then
  LLMK_BUILD_DIR=build-sanitize scripts/build.sh --sanitize
  phase_done "sanitized build"
  LLMK_TEST_SANITIZED=1 run_suite build-sanitize
  phase_done "sanitized suite"
fi
report
