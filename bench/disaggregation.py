#!/usr/bin/env python3
"""Prefill/decode disaggregation against one replica, on the same cores.

    bench/disaggregation.py [--model DIR | --preset llama-110m] [--requests 24]
        [--concurrency 4] [--prompt-words 300] [--max-tokens 48] [--threads 2]

Two set-ups, each behind sglang-router (scripts/fleet.py), each given
--threads compute threads in all:
  one     one replica with --threads threads (round_robin over one worker);
  one-1t  the same with one thread (with --setups);
  pd      a prefill replica and a decode replica with --threads / 2 each
          (sglang-router --pd-disaggregation; the prompt's K/V goes from the
          prefill replica to the decode replica over ZeroMQ).
The workload: --requests greedy streaming /generate requests from
--concurrency clients, each prompt distinct (no prefix-cache reuse) and about
--prompt-words words long. Prints per set-up the mean and p90 time to first
token (TTFT), the mean time per output token after the first (TPOT) and the
output tokens per second, as the clients saw them; and checks that both
set-ups give the same greedy texts.
"""
import argparse
import os
import random
import statistics
import sys
import time
from concurrent import futures

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
from fleet import Fleet, have_router, stream_generate  # noqa: E402

WORDS = ("the little girl saw a big red ball in the park and she ran to get it but a dog was there first "
         "so she sat down under a tree and looked at the sky where a bird flew over the river").split()


def make_prompts(n, words, seed=7):
    rng = random.Random(seed)
    return [f"Story {i}: " + " ".join(rng.choice(WORDS) for _ in range(words)) for i in range(n)]


def run(a, setup, prompts):
    model_args = ["--load-format", "dummy", "--preset", a.preset] if a.preset else []
    common = ["--set", "plugins.kv_allocator=kv.paged", "--set", "kv_cache.capacity_tokens=16384"] + model_args
    if setup in ("one", "one-1t"):
        threads = a.threads if setup == "one" else 1
        fleet = Fleet(a.llmk, a.model, 1, "sglang", "round_robin",
                      serve_args=common + ["--set", f"executor.num_threads={threads}"])
    else:
        half = max(1, a.threads // 2)
        fleet = Fleet(a.llmk, a.model, 2, "sglang", "round_robin",
                      serve_args=common + ["--set", f"executor.num_threads={half}"], roles=["prefill", "decode"])
    with fleet:
        stream_generate(fleet.router_port, prompts[0], 2, ignore_eos=True)  # warm-up
        t0 = time.monotonic()
        with futures.ThreadPoolExecutor(a.concurrency) as pool:
            results = list(pool.map(lambda p: stream_generate(fleet.router_port, p, a.max_tokens, ignore_eos=True), prompts))
        wall = time.monotonic() - t0
    ttfts = sorted(r[0] for r in results)
    tpots = [(r[1] - r[0]) / (r[2] - 1) for r in results if r[2] > 1]
    tokens = sum(r[2] for r in results)
    return {"setup": setup, "ttft_mean_ms": round(1000 * statistics.mean(ttfts), 1),
            "ttft_p90_ms": round(1000 * ttfts[int(0.9 * (len(ttfts) - 1))], 1),
            "tpot_mean_ms": round(1000 * statistics.mean(tpots), 2), "output_tok_s": round(tokens / wall, 1),
            "texts": [r[3] for r in results]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--llmk", default=os.path.join(HERE, "..", "build", "bin", "llmk"))
    p.add_argument("--model", default="", help="model directory or .gguf (or --preset for dummy weights)")
    p.add_argument("--preset", default="", help="dummy-weight preset, e.g. llama-110m")
    p.add_argument("--requests", type=int, default=24)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--prompt-words", type=int, default=300)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--threads", type=int, default=2, help="compute threads in all, per set-up")
    p.add_argument("--setups", nargs="+", choices=["one", "one-1t", "pd"], default=["one", "pd"])
    a = p.parse_args()
    if not a.model and not a.preset:
        p.error("give --model DIR or --preset NAME")
    if not have_router("sglang"):
        sys.exit("disaggregation: sglang-router is not installed in the project venv (scripts/setup.sh installs it)")
    prompts = make_prompts(a.requests, a.prompt_words)
    rows = [run(a, s, prompts) for s in a.setups]
    same = all(r["texts"] == rows[0]["texts"] for r in rows)
    print(f"{a.requests} requests, {a.concurrency} clients, ~{a.prompt_words}-word prompts, {a.max_tokens} tokens, "
          f"{a.threads} threads per set-up; model {a.model or 'dummy ' + a.preset}")
    print(f"{'setup':<7} {'TTFT mean ms':>13} {'TTFT p90 ms':>12} {'TPOT ms':>8} {'out tok/s':>10}")
    for r in rows:
        print(f"{r['setup']:<7} {r['ttft_mean_ms']:>13} {r['ttft_p90_ms']:>12} {r['tpot_mean_ms']:>8} "
              f"{r['output_tok_s']:>10}")
    print("greedy texts identical in every set-up: " + ("yes" if same else "NO"))
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
