#!/usr/bin/env python3
"""Batch-1 decode at tensor 2 x 1 thread (mpirun -np 2) against degree 1 x 2
threads and degree 1 x 1 thread, on one machine, with dummy weights.

Each configuration runs `llmk bench` on the same synthetic prompts (one
sequence at a time, greedy, a fixed output length); the decode step time is
the median inter-token latency of the run. The configurations take turns,
run after run, so a change in the machine's load falls on all of them; the
medians over the runs are compared:

  communication share = (tp2 x 1 step - degree 1 x 2 step) / degree 1 x 2 step

the time tensor parallelism adds over the same two cores used by threads in
one process (all-reduces, the logits gather, rank 0's step announcements).

  bench/parallel_decode.py [--presets llama-110m tinyllama-1.1b] [--runs 3]
                           [--output-len 48] [--llmk build/bin/llmk]

Run it on an idle machine; with both presets and three runs it takes about
five minutes on two cores.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CONFIGS = [
    # name, ranks, threads per rank
    ("tp2 x 1 thread", 2, 1),
    ("degree 1 x 2 threads", 1, 2),
    ("degree 1 x 1 thread", 1, 1),
]


def run_once(args, preset, ranks, threads):
    """Returns the run's median decode step time in seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        cmd = [args.llmk, "bench", "--load-format", "dummy", "--preset", preset, "--threads", str(threads),
               "--num-prompts", str(args.prompts), "--input-len", str(args.input_len),
               "--output-len", str(args.output_len), "--max-concurrency", "1", "--warmup", "1",
               "--no-progress", "--json", out]
        if ranks > 1:
            cmd = [args.mpirun, "--oversubscribe", "--allow-run-as-root", "--bind-to", "none",
                   "--mca", "btl_vader_single_copy_mechanism", "none", "-np", str(ranks)] + cmd + [
                       "--set", f"parallel.tensor={ranks}"]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            sys.exit(f"parallel_decode: {' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")
        with open(out) as f:
            result = json.load(f)
    if result["num_errors"] != 0:
        sys.exit(f"parallel_decode: {preset} with {ranks} ranks x {threads} threads had failed requests")
    return result["itl_s"]["p50"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=["llama-110m", "tinyllama-1.1b"])
    parser.add_argument("--runs", type=int, default=3, help="runs of each configuration, taken in turn")
    parser.add_argument("--prompts", type=int, default=2, help="sequences per run, one at a time")
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=48)
    parser.add_argument("--llmk", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin", "llmk"))
    parser.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    parser.add_argument("--omp-wait-policy", choices=["active", "passive"],
                        help="OMP_WAIT_POLICY for every run (passive: a machine shared with other jobs)")
    args = parser.parse_args()
    if args.omp_wait_policy:
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy  # the ranks inherit mpirun's environment

    started = time.monotonic()
    print(f"batch-1 decode, dummy weights, {args.prompts} x {args.output_len} tokens after {args.input_len}-token "
          f"prompts per run; medians of {args.runs} interleaved runs; "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}; load average {os.getloadavg()[0]:.1f}")
    for preset in args.presets:
        steps = {name: [] for name, _, _ in CONFIGS}
        for r in range(args.runs):
            for name, ranks, threads in CONFIGS:
                s = run_once(args, preset, ranks, threads)
                steps[name].append(s)
                print(f"  {preset} run {r + 1}: {name}: {1 / s:.1f} tok/s", file=sys.stderr, flush=True)
        med = {name: statistics.median(v) for name, v in steps.items()}
        tp2, d2, d1 = med["tp2 x 1 thread"], med["degree 1 x 2 threads"], med["degree 1 x 1 thread"]
        print(f"\n{preset}")
        for name, _, _ in CONFIGS:
            runs = ", ".join(f"{1 / s:.1f}" for s in steps[name])
            print(f"  {name:22s} {1 / med[name]:8.1f} tok/s  ({med[name] * 1e3:.2f} ms/step; runs {runs})")
        print(f"  tp2 x 1 / degree 1 x 2 threads: {d2 / tp2:.2f} (speed ratio)")
        print(f"  tp2 x 1 / degree 1 x 1 thread:  {d1 / tp2:.2f}")
        print(f"  degree 1: 2 threads / 1 thread:  {d1 / d2:.2f}")
        print(f"  communication share: {(tp2 - d2) / d2 * 100:+.1f}% of the degree 1 x 2 threads step")
    print(f"\n({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
