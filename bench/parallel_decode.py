#!/usr/bin/env python3
"""Decode at degree 2 across two processes (mpirun -np 2, one thread each)
against degree 1 x 2 threads and degree 1 x 1 thread, on one machine, with
dummy weights. Two layouts:

  --layout tensor (default): batch-1 decode at tensor 2. Each configuration
    runs `llmk bench` on the same synthetic prompts, one sequence at a time;
    the figure is the median inter-token latency. The communication share is

      (tp2 x 1 step - degree 1 x 2 step) / degree 1 x 2 step,

    the time tensor parallelism adds over the same two cores used by threads
    in one process (all-reduces, the logits gather, the announcements).

  --layout pipeline: batched decode at pipeline 2, --concurrency sequences
    at once (the scheduler keeps one micro-batch per stage in flight); the
    figure is the run's output tokens per second. Against degree 1 x 1
    thread it shows what the second stage adds; against degree 1 x 2
    threads, what splitting layers costs against splitting each matmul.

The configurations take turns, run after run, so a change in the machine's
load falls on all of them; the medians over the runs are compared.

  bench/parallel_decode.py [--layout tensor|pipeline] [--presets llama-110m tinyllama-1.1b]
                           [--runs 3] [--output-len 48] [--concurrency 16] [--llmk build/bin/llmk]

Run it on an idle machine; with both presets and three runs each layout
takes about five minutes on two cores.
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

def configs(layout):
    """(name, ranks, threads per rank, extra llmk arguments) of each configuration."""
    if layout == "tensor":
        two = [("tp2 x 1 thread", 2, 1, [])]
    else:
        two = [("pp2 x 1 thread", 2, 1, []),
               ("pp2, stages in turn", 2, 1, ["--set", "parallel.steps_in_flight=1"])]
    return two + [("degree 1 x 2 threads", 1, 2, []), ("degree 1 x 1 thread", 1, 1, [])]


def run_once(args, preset, ranks, threads, extra):
    """Returns the run's time per token in seconds: the median decode step
    (tensor layout) or the inverse of the output token rate (pipeline)."""
    batched = args.layout == "pipeline"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        cmd = [args.llmk, "bench", "--load-format", "dummy", "--preset", preset, "--threads", str(threads),
               "--num-prompts", str(args.concurrency if batched else args.prompts),
               "--input-len", str(args.input_len), "--output-len", str(args.output_len),
               "--max-concurrency", str(args.concurrency if batched else 1), "--warmup", "1",
               "--no-progress", "--json", out]
        if ranks > 1:
            cmd = [args.mpirun, "--oversubscribe", "--allow-run-as-root", "--bind-to", "none",
                   "--mca", "btl_vader_single_copy_mechanism", "none", "-np", str(ranks)] + cmd + [
                       "--set", f"parallel.{args.layout}={ranks}"] + extra
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            sys.exit(f"parallel_decode: {' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")
        with open(out) as f:
            result = json.load(f)
    if result["num_errors"] != 0:
        sys.exit(f"parallel_decode: {preset} with {ranks} ranks x {threads} threads had failed requests")
    return 1 / result["output_tokens_per_s"] if batched else result["itl_s"]["p50"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layout", choices=["tensor", "pipeline"], default="tensor")
    parser.add_argument("--presets", nargs="+", default=["llama-110m", "tinyllama-1.1b"])
    parser.add_argument("--concurrency", type=int, default=16,
                        help="pipeline layout: sequences decoding at once (and requests per run)")
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
    batched = args.layout == "pipeline"
    runs_of = configs(args.layout)
    two = runs_of[0][0]
    what = (f"{args.concurrency} sequences at once" if batched else f"one sequence at a time, {args.prompts} per run")
    print(f"{args.layout} parallelism: decode, dummy weights, {what}, {args.output_len} tokens after "
          f"{args.input_len}-token prompts; medians of {args.runs} interleaved runs; "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}; load average {os.getloadavg()[0]:.1f}")
    for preset in args.presets:
        steps = {name: [] for name, _, _, _ in runs_of}
        for r in range(args.runs):
            for name, ranks, threads, extra in runs_of:
                s = run_once(args, preset, ranks, threads, extra)
                steps[name].append(s)
                print(f"  {preset} run {r + 1}: {name}: {1 / s:.1f} tok/s", file=sys.stderr, flush=True)
        med = {name: statistics.median(v) for name, v in steps.items()}
        par, d2, d1 = med[two], med["degree 1 x 2 threads"], med["degree 1 x 1 thread"]
        print(f"\n{preset}")
        for name, _, _, _ in runs_of:
            runs = ", ".join(f"{1 / s:.1f}" for s in steps[name])
            unit = "ms/token" if batched else "ms/step"
            print(f"  {name:22s} {1 / med[name]:8.1f} tok/s  ({med[name] * 1e3:.2f} {unit}; runs {runs})")
        print(f"  {two} / degree 1 x 2 threads: {d2 / par:.2f} (speed ratio)")
        print(f"  {two} / degree 1 x 1 thread:  {d1 / par:.2f}")
        print(f"  degree 1: 2 threads / 1 thread:  {d1 / d2:.2f}")
        if batched:
            print(f"  steps in flight / stages in turn: {med['pp2, stages in turn'] / par:.2f}")
        else:
            print(f"  communication share: {(par - d2) / d2 * 100:+.1f}% of the degree 1 x 2 threads step")
    print(f"\n({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
