#!/usr/bin/env bash
# scripts/gpu-check.sh: the CUDA checks that need a real NVIDIA GPU, in one
# command. CI has no GPU: there the same CUDA sources run under the CPU
# simulation (tests/cudasim, test_cudasim) and test_cuda_native reports
# itself skipped. On a machine with a GPU this script
#   1. builds (Release, -DLLMK_CUDA=ON) llmk, the CUDA plugins and
#      test_cuda_native (the cudasim test files against the real CUDA runtime,
#      cuBLAS and cuBLASLt, kernels compiled by nvcc for sm_80 and sm_90a);
#   2. runs test_cuda_native;
#   3. runs it again under compute-sanitizer --tool memcheck, and the kernel
#      tests under --tool racecheck, where compute-sanitizer exists; a hidden
#      test case with a deliberately removed __syncthreads must be flagged by
#      racecheck (the native twin of the simulation's race-check test);
#   4. runs the golden model on the GPU: `llmk generate` on stories260K with
#      executor.device=cuda, linear.cublas and attention.cuda, greedy, each
#      golden prompt's text and a batch of them compared with
#      ../shared/golden/stories260K.json (and the CPU executor of the same
#      binary as a control);
#   5. runs the GPU benchmarks of the executor's part 2 (issue 16):
#      bench_gpu (dummy llama2-7b and llama3-8b, every CUDA linear plugin,
#      beside the copy bandwidth and GEMM peak measured in the same run) and,
#      where python3 has PyTorch, the plain PyTorch baseline
#      bench/cuda/torch_baseline.py;
#   6. the parallel phase (scripts/gpu-check-parallel.sh): the comm suite
#      on comm.nccl (one rank) and comm.mpi (two), and 4's golden prompts at
#      tensor 2 over comm.mpi, two ranks on the one GPU (mpirun -np 2);
#   7. where the host CPU has AMX-INT8 (the GPU machines' Xeons do), runs
#      linear.int4's tile kernel on the tile unit itself: its bits against
#      the vector kernels (test_kernels_avx512bf16 "[amx]"; CI checks the
#      same kernel on a software model only) and 128-token prefill with
#      "matmul":"own" and "auto" alternating (bench_forward_cpu);
#   8. prints a markdown summary (GPU, driver, what passed, the benchmark
#      tables) ready for docs/PERFORMANCE.md.
#
# Usage
#   scripts/gpu-check.sh [options]                 build here and check (needs the
#                                                  project's Debian dependencies and nvcc)
#   scripts/gpu-check.sh --bundle FILE.tar.xz      build here (no GPU needed) and pack
#                                                  what the checks run into one archive
#   scripts/gpu-check.sh --prebuilt FILE|DIR       check from such an archive (or its
#                                                  unpacked folder) on a GPU machine
# Options
#   --build-dir DIR   build folder (default build-gpu)
#   --out DIR         logs and summary.md (default <build-dir>/gpu-check, or
#                     <bundle folder>/gpu-check with --prebuilt)
#   --phases LIST     comma-separated subset of tests,memcheck,racecheck,golden,
#                     bench,parallel,amx (default: all), to split a run across
#                     short sessions
#   --jobs N          build parallelism (default: nproc)
#   --bench-presets LIST  dummy presets bench_gpu and the PyTorch baseline run
#                     (default llama2-7b,llama3-8b), to fit a short session
#
# Why a bundle: the GPU machines this project is sometimes lent have nvcc,
# CMake, ninja and compute-sanitizer, but none of llmk's Debian dependencies
# (CAF, Boost, ZeroMQ, sentencepiece, spdlog, yaml-cpp, OpenBLAS, ...) and no
# network to install them. A build of only the kernels with CMake + nvcc +
# Catch2 would leave out what matters most: the executor end to end, the
# plugins loaded by the engine's PluginRegistry and `llmk generate`, all of
# which link llmk_core and its dependencies. So the binaries are built on a
# development machine (Debian 12, same CUDA 13 toolkit), packed with the
# shared libraries they load (ldd closure, without glibc and without the CUDA
# libraries, which the GPU machine has), the stories260K model and its golden
# vectors, the Llama 2 tokenizer the dummy presets use, and compressed with
# xz (about 30 MiB, under the 64 MiB such a machine's carry allows). On the
# GPU machine a carried library is put on LD_LIBRARY_PATH only when the
# system lacks its soname, so the machine's own newer libstdc++, libcudart
# and libcublasLt are used where they exist.
#
# With a borrowed GPU machine that runs commands in a copy of this checkout
# (a size limit on what travels, a time limit per command): pack into an
# ignored folder that travels with the copy, then split the phases, e.g.
#   scripts/gpu-check.sh --bundle build-bundle/gpu-check.tar.xz            # here
#   scripts/gpu-check.sh --prebuilt build-bundle/gpu-check.tar.xz --phases tests,golden
#   scripts/gpu-check.sh --prebuilt build-bundle/gpu-check.tar.xz --phases memcheck,racecheck
#   scripts/gpu-check.sh --prebuilt build-bundle/gpu-check.tar.xz --phases bench
# Times seen on an H200 (2026-11-26): unpacking and tests 8 s, golden 7 s,
# racecheck 31 s, memcheck 10 s; bench_gpu's rows about 45 s each on
# llama2-7b (mostly set-up, before the set-up was trimmed) and the PyTorch
# baseline 15 s, so `--bench-presets llama2-7b` with the four CUDA linear
# plugins wants some 4 minutes. The parallel phase: about 30 s, an estimate
# (not yet run on a GPU): two suites of a few seconds, 6 mpirun launches; a
# bundle carries Open MPI for it (libnccl.so.2 is the machine's). Keep logs
# under --out in a folder that comes back (phases write many small files:
# pack them into one).
#
# Exit status: 0 when every check that ran passed, 1 when one failed, 2 when
# there is no NVIDIA GPU (nothing is built then), 3 for a usage or build error.
set -uo pipefail

repo_root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/gpu-check-parallel.sh
. "$(dirname "$0")/gpu-check-parallel.sh"
# shellcheck source=scripts/gpu-check-bundle.sh
. "$(dirname "$0")/gpu-check-bundle.sh"
build_dir=build-gpu
out_dir=""
bundle_file=""
prebuilt=""
phases="tests,memcheck,racecheck,golden,bench,parallel,amx"
bench_presets="llama2-7b,llama3-8b"
jobs=$(nproc 2>/dev/null || echo 4)

die() { echo "gpu-check: $*" >&2; exit 3; }
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir=${2:?--build-dir needs a folder}; shift 2 ;;
    --out) out_dir=${2:?--out needs a folder}; shift 2 ;;
    --bundle) bundle_file=${2:?--bundle needs a file name}; shift 2 ;;
    --prebuilt) prebuilt=${2:?--prebuilt needs a file or folder}; shift 2 ;;
    --phases) phases=${2:?--phases needs a list}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs a number}; shift 2 ;;
    --bench-presets) bench_presets=${2:?--bench-presets needs a list}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ -n "$bundle_file" ] && [ -n "$prebuilt" ] && die "--bundle and --prebuilt exclude each other"
for p in ${phases//,/ }; do
  case "$p" in tests|memcheck|racecheck|golden|bench|parallel|amx) ;; *) die "unknown phase '$p' in --phases" ;; esac
done
want_phase() { [[ ",$phases," == *",$1,"* ]]; }
case "$build_dir" in /*) ;; *) build_dir="$repo_root/$build_dir" ;; esac

# The targets the checks run: the command, the native tests, the benchmark
# and the plugins they load (the CPU ones serve the control run).
build_targets=(llmk test_cuda_native bench_gpu llmk_attention_cuda llmk_linear_cublas llmk_linear_cuda_int8
               llmk_linear_cuda_int4 llmk_linear_cuda_fp8 llmk_attention_cpu llmk_linear_dense
               llmk_kv_contiguous llmk_kv_paged llmk_kv_vm
               test_kernels_avx512bf16 bench_forward_cpu llmk_plugin_linear_int4 llmk_plugin_linear_int4_avx512bf16
               llmk_comm_mpi llmk_comm_nccl)
# Plugins packed into a bundle: the CUDA ones, and the CPU defaults for the
# control run (linear.dense brings oneDNN, 7 MB of the compressed bundle).
bundle_plugins=(attention_cuda linear_cublas linear_cuda_int8 linear_cuda_int4 linear_cuda_fp8 attention_cpu
                linear_dense kv_contiguous kv_paged kv_vm linear_int4 linear_int4.avx512bf16 comm_mpi comm_nccl)
# The AMX phase's programs (CPU only).
amx_bins=(test_kernels_avx512bf16 bench_forward_cpu)
# The CUDA linear plugins bench_gpu compares.
bench_linears=linear.cublas,linear.cuda_int8,linear.cuda_int4,linear.cuda_fp8

configure_and_build() {
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || die "nvcc not found: the CUDA build needs the CUDA toolkit"
  local generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  echo "gpu-check: configuring $build_dir (Release, LLMK_CUDA=ON)" >&2
  cmake -S "$repo_root" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DLLMK_CUDA=ON \
    -DLLMK_BUILD_TESTS=ON -DLLMK_BUILD_BENCH=ON -DLLMK_BUILD_EXAMPLES=OFF >&2 || die "configure failed"
  echo "gpu-check: building ${build_targets[*]}" >&2
  cmake --build "$build_dir" --target "${build_targets[@]}" -j "$jobs" >&2 || die "build failed"
}

if [ -n "$bundle_file" ]; then
  case "$bundle_file" in /*) ;; *) bundle_file="$PWD/$bundle_file" ;; esac
  make_bundle
  exit 0
fi

# ---------------------------------------------------------------- the GPU
gpu_query=""
if command -v nvidia-smi >/dev/null 2>&1; then
  gpu_query=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>/dev/null | head -1)
fi
if [ -z "$gpu_query" ]; then
  if command -v nvidia-smi >/dev/null 2>&1; then reason="nvidia-smi lists no GPU"; else reason="nvidia-smi is not installed"; fi
  echo "gpu-check: no NVIDIA GPU on this machine ($reason); nothing was built or run." >&2
  echo "gpu-check: the CUDA sources are checked here by the simulation instead: ctest -R cudasim" >&2
  echo "gpu-check: to check on a GPU machine without llmk's dependencies, pack a bundle here:" >&2
  echo "  scripts/gpu-check.sh --bundle build-bundle/gpu-check.tar.xz   # then --prebuilt build-bundle/gpu-check.tar.xz there" >&2
  exit 2
fi
IFS=',' read -r gpu_name gpu_driver gpu_memory gpu_cc <<< "$gpu_query"
trim() { local s="$1"; s="${s#"${s%%[![:space:]]*}"}"; echo "${s%"${s##*[![:space:]]}"}"; }
gpu_name=$(trim "$gpu_name"); gpu_driver=$(trim "$gpu_driver"); gpu_memory=$(trim "$gpu_memory"); gpu_cc=$(trim "$gpu_cc")

# ---------------------------------------------------------------- binaries
if [ -n "$prebuilt" ]; then
  use_prebuilt
else
  configure_and_build
  llmk_bin="$build_dir/bin/llmk"; test_bin="$build_dir/tests/test_cuda_native"
  bench_bin="$build_dir/bin/bench_gpu"; torch_baseline="$repo_root/bench/cuda/torch_baseline.py"
  kernels_bin="$build_dir/tests/test_kernels_avx512bf16"; forward_bin="$build_dir/bin/bench_forward_cpu"
  plugin_dir="$build_dir/plugins"; shared_dir="$repo_root/../shared"
  [ -n "$out_dir" ] || out_dir="$build_dir/gpu-check"
fi
case "$out_dir" in /*) ;; *) out_dir="$PWD/$out_dir" ;; esac
mkdir -p "$out_dir"
# The tests and the engine find plugins and ../shared through these.
export LLMK_PLUGIN_PATH="$plugin_dir" LLMK_SHARED_DIR="$shared_dir"
model="$shared_dir/models/stories260K"
golden="$shared_dir/golden/stories260K.json"

# ---------------------------------------------------------------- checks
rows=()
failures=0
record() {  # check, result, detail
  rows+=("| $1 | $2 | $3 |")
  [ "$2" = "FAILED" ] && failures=$((failures + 1))
  echo "gpu-check: $1: $2${3:+ ($3)}" >&2
}
# Catch2's last summary line: "All tests passed (...)" or "test cases: ...".
catch_summary() { grep -E "^(All tests passed|test cases:)" "$1" | tail -1 | sed 's/|/\//g'; }
elapsed() { echo "$(( $(date +%s) - $1 )) s"; }

sanitizer=""
if command -v compute-sanitizer >/dev/null 2>&1; then sanitizer=compute-sanitizer
elif [ -x /usr/local/cuda/bin/compute-sanitizer ]; then sanitizer=/usr/local/cuda/bin/compute-sanitizer; fi
# Kernel tests only for racecheck: the executor, sampler and plugin tests
# repeat the same kernels end to end, and cuBLAS's kernels are not ours.
# Catch2 runs hidden cases under a spec of exclusions only: the canary, racy
# on purpose, is excluded by its tag (before the name pattern, which would
# otherwise take the tag into the name).
kernel_spec='~[cuda_executor]~[cuda_sampler]~[cublaslt]~[linear_cuda_quant]~[racecheck_canary]~cublas*'

if want_phase tests; then
  t0=$(date +%s)
  timeout 1800 "$test_bin" > "$out_dir/native.log" 2>&1
  status=$?
  summary=$(catch_summary "$out_dir/native.log")
  if grep -q LLMK_TEST_SKIPPED "$out_dir/native.log"; then
    record "test_cuda_native" "FAILED" "the CUDA runtime sees no device although nvidia-smi does: $(grep -m1 LLMK_TEST_SKIPPED "$out_dir/native.log")"
  elif [ $status -eq 0 ]; then record "test_cuda_native" "passed" "$summary, $(elapsed "$t0")"
  else record "test_cuda_native" "FAILED" "exit $status: ${summary:-see native.log}"; fi
fi

if want_phase memcheck; then
  if [ -z "$sanitizer" ]; then record "memcheck (compute-sanitizer)" "not run" "compute-sanitizer not found"
  else
    t0=$(date +%s)
    timeout 3600 "$sanitizer" --tool memcheck --report-api-errors no --error-exitcode 99 --print-limit 50 "$test_bin" \
      > "$out_dir/memcheck.log" 2>&1
    status=$?
    verdict=$(grep -E "ERROR SUMMARY" "$out_dir/memcheck.log" | tail -1 | sed 's/^========= //')
    if [ $status -eq 0 ]; then record "memcheck, every test case" "passed" "${verdict:-no errors}, $(elapsed "$t0")"
    else record "memcheck, every test case" "FAILED" "exit $status: ${verdict:-see memcheck.log}"; fi
  fi
fi

if want_phase racecheck; then
  if [ -z "$sanitizer" ]; then record "racecheck (compute-sanitizer)" "not run" "compute-sanitizer not found"
  else
    t0=$(date +%s)
    timeout 3600 "$sanitizer" --tool racecheck --report-api-errors no --error-exitcode 99 --print-limit 50 "$test_bin" "$kernel_spec" \
      > "$out_dir/racecheck.log" 2>&1
    status=$?
    verdict=$(grep -E "RACECHECK SUMMARY" "$out_dir/racecheck.log" | tail -1 | sed 's/^========= //')
    if [ $status -eq 0 ]; then record "racecheck, kernel test cases" "passed" "${verdict:-no hazards}, $(elapsed "$t0")"
    else record "racecheck, kernel test cases" "FAILED" "exit $status: ${verdict:-see racecheck.log}"; fi
    # The canary: a reduction without its __syncthreads must be reported.
    "$sanitizer" --tool racecheck --report-api-errors no --print-limit 5 "$test_bin" "[racecheck_canary]" > "$out_dir/racecheck-canary.log" 2>&1
    hazards=$(grep -E "RACECHECK SUMMARY" "$out_dir/racecheck-canary.log" | tail -1 | grep -oE "[0-9]+ hazard" | grep -oE "[0-9]+")
    if [ "${hazards:-0}" -gt 0 ]; then record "racecheck flags a removed __syncthreads" "passed" "$hazards hazards reported"
    else record "racecheck flags a removed __syncthreads" "FAILED" "no hazard reported (racecheck-canary.log)"; fi
  fi
fi

# One device's golden run: each prompt streamed alone (stdout against the
# golden text), then the non-empty prompts as one batch (ids against the
# golden ids). The golden text of a continuation was decoded alone, which
# drops the leading space the engine streams after a prompt: one leading
# space is allowed there and nowhere else. llmk_launcher: what starts llmk
# (empty, or mpirun and its arguments; stdin is kept from it, as mpirun
# would read the prompts the loop reads).
llmk_launcher=()
golden_run() {  # label, extra llmk arguments...
  local label=$1
  shift
  local log="$out_dir/golden-$label.log" batch="$out_dir/golden-$label-batch.jsonl"
  : > "$log"
  python3 - "$golden" > "$out_dir/golden-prompts.jsonl" <<'EOF'
import json, sys
for i, c in enumerate(json.load(open(sys.argv[1]))["cases"]):
    print(json.dumps({"id": str(i), "prompt": c["prompt"], "max_tokens": len(c["greedy_ids"]), "temperature": 0}))
EOF
  local line n=0 bad=0
  while IFS= read -r line; do
    local prompt max_tokens
    prompt=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["prompt"], end="")' "$line")
    max_tokens=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["max_tokens"])' "$line")
    "${llmk_launcher[@]}" "$llmk_bin" generate --model "$model" --prompt "$prompt" --temperature 0 --max-tokens "$max_tokens" --ignore-eos \
      "$@" < /dev/null > "$out_dir/golden-$label-$n.txt" 2>> "$log" || bad=$((bad + 1))
    # mpirun gives a rank's stdout a terminal, where llmk ends with a newline.
    [ ${#llmk_launcher[@]} -gt 0 ] && python3 -c 'import sys; p = sys.argv[1]; t = open(p).read()
if t.endswith("\n"): open(p, "w").write(t[:-1])' "$out_dir/golden-$label-$n.txt"
    python3 - "$golden" "$n" "$out_dir/golden-$label-$n.txt" >> "$log" 2>&1 <<'EOF' || bad=$((bad + 1))
import json, sys
case = json.load(open(sys.argv[1]))["cases"][int(sys.argv[2])]
got = open(sys.argv[3], encoding="utf-8").read()
ok = got == case["greedy_text"] or (case["prompt"] != "" and got == " " + case["greedy_text"])
print(f"case {sys.argv[2]}: {'equal' if ok else 'DIFFERENT'}: {got!r}")
sys.exit(0 if ok else 1)
EOF
    n=$((n + 1))
  done < "$out_dir/golden-prompts.jsonl"
  grep -v '"prompt": ""' "$out_dir/golden-prompts.jsonl" > "$out_dir/golden-batch-in.jsonl"
  "${llmk_launcher[@]}" "$llmk_bin" generate --model "$model" --ignore-eos --batch-file "$out_dir/golden-batch-in.jsonl" "$@" \
    < /dev/null > "$batch" 2>> "$log" || bad=$((bad + 1))
  python3 - "$golden" "$batch" >> "$log" 2>&1 <<'EOF' || bad=$((bad + 1))
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
results = [json.loads(line) for line in open(sys.argv[2]) if line.strip()]
ok = len(results) == sum(1 for c in cases if c["prompt"])
for r in results:
    same = r.get("token_ids") == cases[int(r["id"])]["greedy_ids"]
    print(f"batch case {r['id']}: ids {'equal' if same else 'DIFFERENT'}")
    ok = ok and same
sys.exit(0 if ok else 1)
EOF
  echo "$n $bad"
}

if want_phase golden; then
  cuda_args=(--set executor.device=cuda --set plugins.linear=linear.cublas --set plugins.attention=attention.cuda)
  t0=$(date +%s)
  read -r n bad <<< "$(golden_run cuda "${cuda_args[@]}")"
  if [ "$bad" -eq 0 ]; then
    record "golden stories260K on the GPU (cuda executor, linear.cublas, attention.cuda)" "passed" \
      "$n prompts streamed equal the golden text, a batch of the non-empty ones equals the golden ids, $(elapsed "$t0")"
  else record "golden stories260K on the GPU (cuda executor, linear.cublas, attention.cuda)" "FAILED" \
      "$bad comparisons differ or runs failed, of $n prompts and one batch (golden-cuda.log)"; fi
  read -r n bad <<< "$(golden_run cpu --set executor.device=cpu)"
  if [ "$bad" -eq 0 ]; then record "control: the same binary on the CPU executor" "passed" "golden text and ids"
  else record "control: the same binary on the CPU executor" "FAILED" "$bad comparisons differ (golden-cpu.log)"; fi
fi

if want_phase bench; then
  t0=$(date +%s)
  if [ ! -x "$bench_bin" ]; then record "bench_gpu" "not run" "no bench_gpu binary"
  else
    timeout 1800 "$bench_bin" --presets "$bench_presets" --linear "$bench_linears" > "$out_dir/bench-gpu.md" 2> "$out_dir/bench-gpu.log"
    status=$?
    if [ $status -eq 0 ]; then record "bench_gpu (figures below)" "ran" "$(elapsed "$t0")"
    else record "bench_gpu" "FAILED" "exit $status (bench-gpu.log)"; fi
  fi
  : > "$out_dir/torch-baseline.jsonl"
  if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    t0=$(date +%s)
    torch_ok=1
    for preset in ${bench_presets//,/ }; do
      if timeout 900 python3 "$torch_baseline" --preset "$preset" > "$out_dir/torch-baseline-$preset.log" 2>&1; then
        tail -1 "$out_dir/torch-baseline-$preset.log" >> "$out_dir/torch-baseline.jsonl"
      else torch_ok=0; fi
    done
    if [ $torch_ok -eq 1 ]; then record "PyTorch baseline (figures below)" "ran" "$(elapsed "$t0")"
    else record "PyTorch baseline" "FAILED" "see torch-baseline-*.log"; fi
  else record "PyTorch baseline" "not run" "python3 has no PyTorch with CUDA"; fi
fi

if want_phase parallel; then parallel_phase; fi

if want_phase amx; then
  : > "$out_dir/amx-bench.md"
  if ! grep -qw amx_int8 /proc/cpuinfo; then record "int4 on AMX-INT8 tiles" "not run" "this CPU has no AMX-INT8"
  elif [ ! -x "$kernels_bin" ] || [ ! -x "$forward_bin" ]; then
    record "int4 on AMX-INT8 tiles" "not run" "no test_kernels_avx512bf16 or bench_forward_cpu (a bundle from before the phase)"
  else
    t0=$(date +%s)
    timeout 600 "$kernels_bin" "[amx]" > "$out_dir/amx-tests.log" 2>&1
    status=$?
    summary=$(catch_summary "$out_dir/amx-tests.log")
    if grep -q LLMK_TEST_SKIPPED "$out_dir/amx-tests.log"; then
      record "int4 on AMX-INT8 tiles: bits against the vector kernels" "FAILED" \
        "the CPU shows amx_int8 but the kernel ran no tile: $(grep -m1 LLMK_TEST_SKIPPED "$out_dir/amx-tests.log")"
    elif [ $status -eq 0 ]; then record "int4 on AMX-INT8 tiles: bits against the vector kernels" "passed" "$summary, $(elapsed "$t0")"
    else record "int4 on AMX-INT8 tiles: bits against the vector kernels" "FAILED" "exit $status: ${summary:-see amx-tests.log}"; fi
    # Prefill of llama-110m (dummy weights), the vector kernels and the tiles alternating.
    t0=$(date +%s)
    bench_ok=1
    for round in 1 2; do
      for matmul in own auto; do
        line=$(timeout 300 "$forward_bin" --linear linear.int4 --linear-options "{\"matmul\":\"$matmul\"}" --threads 2 \
                 --prompt-tokens 128 --decode-tokens 0 --repeats 3 2>> "$out_dir/amx-bench.log" | grep "^prefill")
        [ -n "$line" ] || bench_ok=0
        echo "| $round | $matmul | ${line:-failed} |" >> "$out_dir/amx-bench.md"
      done
    done
    if [ $bench_ok -eq 1 ]; then record "int4 prefill, vector kernels against AMX tiles (figures below)" "ran" "$(elapsed "$t0")"
    else record "int4 prefill, vector kernels against AMX tiles" "FAILED" "see amx-bench.log"; fi
  fi
fi

# ---------------------------------------------------------------- summary
nvcc_version=$( (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version 2>/dev/null) | grep -oE "release [0-9.]+" | head -1)
if [ -n "$prebuilt" ]; then
  binaries="bundle built $(sed -n 's/^built: //p' "$root/MANIFEST" 2>/dev/null), source $(sed -n 's/^source: //p' "$root/MANIFEST" 2>/dev/null)"
else
  binaries="built on this machine, source $(git -C "$repo_root" describe --always --dirty 2>/dev/null || echo unknown)"
fi
{
  echo "### GPU check: $gpu_name, $(date -u +%Y-%m-%d)"
  echo
  echo "| | |"
  echo "|---|---|"
  echo "| GPU | $gpu_name, $gpu_memory, compute capability $gpu_cc |"
  echo "| driver | $gpu_driver |"
  echo "| CUDA on the machine | ${nvcc_version:-nvcc not found} |"
  echo "| binaries | $binaries |"
  echo "| compute-sanitizer | ${sanitizer:-not found} |"
  echo
  echo "| check | result | detail |"
  echo "|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "#### GPU benchmarks"
  echo
  if [ -s "$out_dir/bench-gpu.md" ] && want_phase bench; then
    echo "bench_gpu (dummy weights, BF16 KV; limits measured in the same run):"
    echo
    cat "$out_dir/bench-gpu.md"
  else
    echo "Not measured in this run (phase bench not run or bench_gpu failed)."
  fi
  if [ -s "$out_dir/amx-bench.md" ] && want_phase amx; then
    echo
    echo "#### int4 prefill on the host CPU, vector kernels (own) against AMX-INT8 tiles (auto)"
    echo
    echo "CPU: $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); bench_forward_cpu --linear linear.int4"
    echo "--threads 2 --prompt-tokens 128 --decode-tokens 0 --repeats 3, llama-110m dummy weights:"
    echo
    echo "| round | matmul | prefill |"
    echo "|---|---|---|"
    cat "$out_dir/amx-bench.md"
  fi
  if [ -s "$out_dir/torch-baseline.jsonl" ] && want_phase bench; then
    echo
    echo "PyTorch baseline (bench/cuda/torch_baseline.py, one JSON line per preset):"
    echo
    echo '```'
    cat "$out_dir/torch-baseline.jsonl"
    echo '```'
  fi
} > "$out_dir/summary.md"
echo
cat "$out_dir/summary.md"
echo
echo "gpu-check: logs and summary in $out_dir" >&2
[ "$failures" -eq 0 ]
