#!/usr/bin/env python3
"""Mutation testing of the CUDA code under the simulation.

Plants each bug of MUTATIONS, one at a time, in a scratch git worktree of
HEAD (never in this checkout), rebuilds test_cudasim there and runs it
(stopping at the first failure); a mutation is caught when the run fails.
Prints a Markdown table: the mutation, caught or missed, and the first line
that names the failure (a cudasim report, or Catch2's failed assertion).

    scripts/mutate_cudasim.py [--scratch DIR] [--keep] [--only SUBSTRING]

The scratch worktree defaults to a sibling of this checkout (so that a
shared ccache with base_dir above both serves most objects); it is removed
at the end unless --keep. Each mutation costs an incremental build and one
run of test_cudasim (about a minute on two cores).
"""
import argparse
import pathlib
import re
import subprocess
import sys

# (file, text to replace (must occur exactly once), replacement, what the bug is)
MUTATIONS = [
    ("kernels/cuda/silu_mul.cu", "j < n; j += stride", "j <= n; j += stride",
     "silu_mul: one element past its buffers (j <= n)"),
    ("core/cuda/cuda_executor.cpp",
     '    check_cuda(cudaEventSynchronize(meta_uploaded_), "waiting for the previous step\'s upload");\n'
     "    stage_meta(b, m);",
     "    stage_meta(b, m);",
     "executor: pinned metadata rewritten without waiting for the previous upload"),
    ("kernels/cuda/attention_decode.cu",
     "  if (tid < kDecodeTileKeys) slots[0][tid] = slot_of(begin + tid);\n  __syncthreads();",
     "  if (tid < kDecodeTileKeys) slots[0][tid] = slot_of(begin + tid);",
     "decode attention: barrier after the first tile's slots removed"),
    ("kernels/cuda/attention_decode.cu",
     "const int group = a.num_heads / a.num_kv_heads;",
     "const int group = a.num_heads / a.num_kv_heads + (a.num_kv_heads > 1 ? 1 : 0);",
     "decode attention: query heads mapped to the wrong KV head when num_kv_heads > 1"),
    ("kernels/cuda/attention_paged.cu",
     "slot = table[key / args.block_size] + key % args.block_size;",
     "slot = table[key / args.block_size] + (key + 1) % args.block_size;",
     "paged attention: block-table offset shifted by one"),
    ("kernels/cuda/sampling.cu",
     "v -= static_cast<double>(p.frequency_penalty) * count + static_cast<double>(p.presence_penalty);",
     "v += static_cast<double>(p.frequency_penalty) * count + static_cast<double>(p.presence_penalty);",
     "sampler: frequency/presence penalties with the wrong sign"),
    ("kernels/cuda/embedding.cu", "if (id < 0 || id >= vocab) {", "if (id < 0 || id > vocab) {",
     "embedding: id == vocab read one row past the table"),
    ("kernels/cuda/quantize_rows.cu",
     "for (int64_t k = threadIdx.x; k < k_pad; k += blockDim.x) store_q(out + k, k < in_features ? row[k] * inv : 0.0f);",
     "for (int64_t k = threadIdx.x; k < k_pad; k += blockDim.x) store_q(out + k, k <= in_features ? row[k] * inv : 0.0f);",
     "quantize_rows: reads one element past each row into the padding"),
    ("kernels/cuda/rmsnorm.cu", "sum_squares / static_cast<float>(dim) + eps",
     "sum_squares / static_cast<float>(dim - 1) + eps", "rmsnorm: mean over dim - 1"),
    ("core/cuda/cuda_executor.cpp",
     '    check_cuda(cudaEventSynchronize(meta_uploaded_), "waiting for the previous step\'s upload");\n'
     "    const size_t old_bytes = meta.host.bytes();",
     "    const size_t old_bytes = meta.host.bytes();",
     "executor: a decode graph's pinned metadata rewritten without waiting for the previous upload"),
    ("core/cuda/cuda_executor.cpp", "    stage_meta(b, m);\n    enqueue_meta_upload(m);\n", "    stage_meta(b, m);\n",
     "executor: an eager step's metadata staged but never uploaded"),
    ("kernels/cuda/gemm_w4.cu", "const uint32_t q = (packed[c * k_words + k / 8] >> (4 * (k % 8))) & 0xfu;",
     "const uint32_t q = (packed[c * k_words + k / 8] >> (4 * ((k % 8) ^ 1))) & 0xfu;",
     "int4 dequantization: the two nibbles of each byte swapped"),
    ("kernels/cuda/gemm_w4.cu", "const float w = (static_cast<float>((word >> (4 * j)) & 0xfu) - z) * sc;",
     "const float w = (static_cast<float>((word >> (4 * (j ^ 1))) & 0xfu) - z) * sc;",
     "int4 GEMV: the two nibbles of each byte swapped"),
    ("kernels/cuda/attention_decode.cu",
     "    for (int i = 0; i < num_used; ++i)\n      x += a.partial_acc",
     "    for (int i = 1; i < num_used; ++i)\n      x += a.partial_acc",
     "split-K decode merge: the first split's accumulator skipped"),
    ("kernels/cuda/attention_decode.cu",
     "for (int i = 0; i < num_used; ++i) max_all = fmaxf(max_all, a.partial_max[first + i]);",
     "for (int i = 0; i < 1; ++i) max_all = fmaxf(max_all, a.partial_max[first + i]);",
     "split-K decode merge: splits rescaled against the first split's maximum, not the largest"),
    ("kernels/cuda/attention_decode.cu",
     "for (int offset = kLanesPerKey / 2; offset > 0; offset /= 2)",
     "for (int offset = kLanesPerKey; offset > 0; offset /= 2)",
     "decode attention: the dot products' shuffle starts one offset too far (adds another key's lanes)"),
    ("kernels/cuda/attention_paged.cu",
     "slot = table[key / args.block_size] + key % args.block_size;",
     "slot = table[(key + 1) / args.block_size] + key % args.block_size;",
     "paged attention: a block's last key reads the next block-table entry"),
    ("kernels/cuda/attention_paged.cu",
     "const int kv_head = head / (args.num_heads / args.num_kv_heads);",
     "const int kv_head = head % args.num_kv_heads;",
     "paged attention: query head h reads KV head h % num_kv_heads, not h / group"),
    ("kernels/cuda/attention_flash.cu",
     "const int first_head = kv_head * args.group + chunk * hpb;",
     "const int first_head = kv_head + chunk * hpb;",
     "flash attention: a KV head's query heads taken from kv_head, not kv_head * group"),
    ("kernels/cuda/attention_paged.cu",
     "const T* q_in = (sinks && q_sink != nullptr ? q_sink : q) + q_offset;",
     "const T* q_in = q + q_offset;",
     "paged attention: the sinks scored with q, not q_sink"),
    ("kernels/cuda/attention_decode.cu",
     "const float* q_key = tile + key < keys_seen.num_sinks ? q_sink_rows : q_rows;",
     "const float* q_key = q_rows;",
     "decode attention: the sinks scored with q, not q_sink"),
    ("kernels/cuda/attention_flash.cu",
     "const T* q_in = sinks && q_sink != nullptr ? q_sink : q;",
     "const T* q_in = q;",
     "flash attention: the sinks scored with q, not q_sink"),
    ("core/cuda/cuda_forward.cpp", "    al.q_sink = q_sink;\n", "",
     "executor: q_sink not given to the attention plugin (StreamingLLM)"),
    ("kernels/cuda/rope.cu", "const double angle = static_cast<double>(position) * inv_freq[i];",
     "const double angle = static_cast<double>(position - 1) * inv_freq[i];",
     "rope: positions past the tables rotated one position short"),
    ("core/cuda/step_metadata.cpp",
     "host[m.layout.cache_positions + t] = b.context_lens[s] - (end - t);",
     "host[m.layout.cache_positions + t] = b.positions[t];",
     "executor: q_sink rotated by the text position, not the cache position"),
]


def run(cmd, cwd, check=True, timeout=None):
    result = subprocess.run(cmd, cwd=cwd, text=True, capture_output=True, timeout=timeout)
    if check and result.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed in {cwd}:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return result


def failure_line(output):
    """Catch2's first failed assertion (its messages carry the simulation's
    detail), else the first line naming a failure. The simulation's own lines
    are not used first: tests of its checks print expected reports too."""
    for line in output.splitlines():
        if "failed:" in line or "FAILED" in line:
            return re.sub(r"\s+", " ", line)[:400]
    for line in output.splitlines():
        if "error" in line.lower():
            return line[:400]
    return "(no failure line)"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scratch", help="the scratch worktree (default: a sibling named <checkout>-mutants)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch worktree and its build")
    parser.add_argument("--only", help="plant only the mutations whose description contains this")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per test run")
    args = parser.parse_args()

    root = pathlib.Path(run(["git", "rev-parse", "--show-toplevel"], ".").stdout.strip())
    scratch = pathlib.Path(args.scratch or root.parent / (root.name + "-mutants"))
    mutations = [m for m in MUTATIONS if not args.only or args.only in m[3]]
    if not scratch.exists():
        run(["git", "worktree", "add", "--detach", str(scratch), "HEAD"], root)
    build = scratch / "build"
    if not (build / "build.ninja").exists():
        run(["cmake", "-S", ".", "-B", "build", "-G", "Ninja"], scratch)
    run(["cmake", "--build", "build", "--target", "test_cudasim"], scratch)
    binary = str(build / "tests" / "test_cudasim")
    baseline = run([binary, "-r", "compact", "-a"], scratch, check=False, timeout=args.timeout)
    if baseline.returncode != 0:
        sys.exit("test_cudasim fails without a mutation:\n" + failure_line(baseline.stdout + baseline.stderr))

    rows = []
    for path, old, new, what in mutations:
        source = scratch / path
        text = source.read_text()
        if text.count(old) != 1:
            rows.append((what, "not planted", f"the text to replace occurs {text.count(old)} times in {path}"))
            continue
        source.write_text(text.replace(old, new))
        try:
            built = run(["cmake", "--build", "build", "--target", "test_cudasim"], scratch, check=False)
            if built.returncode != 0:
                rows.append((what, "not built", failure_line(built.stdout)))
                continue
            try:
                tested = run([binary, "-r", "compact", "-a"], scratch, check=False, timeout=args.timeout)
                output = tested.stdout + tested.stderr
                caught = tested.returncode != 0
                rows.append((what, "caught" if caught else "MISSED", failure_line(output) if caught else ""))
            except subprocess.TimeoutExpired:
                rows.append((what, "caught (timeout)", f"test_cudasim ran past {args.timeout} s"))
        finally:
            source.write_text(text)
        print(f"{rows[-1][1]:>12}  {what}", file=sys.stderr)
    run(["cmake", "--build", "build", "--target", "test_cudasim"], scratch, check=False)

    print("| mutation | result | first failure |")
    print("|---|---|---|")
    for what, result, line in rows:
        print(f"| {what} | {result} | {line.replace('|', '/')} |")
    caught = sum(r[1].startswith("caught") for r in rows)
    print(f"\n{caught} of {len(rows)} caught.")
    if not args.keep:
        run(["git", "worktree", "remove", "--force", str(scratch)], root, check=False)


if __name__ == "__main__":
    main()
