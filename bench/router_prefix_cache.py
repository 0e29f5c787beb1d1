#!/usr/bin/env python3
"""Prefix-cache reuse across a fleet: sglang-router's cache_aware against round_robin.

    bench/router_prefix_cache.py --model DIR [--replicas 3] [--requests 300]
        [--concurrency 8] [--capacity-tokens 1024] [--system-repeat 1] [--policies cache_aware round_robin]

For each policy: a fresh fleet (scripts/fleet.py: N `llmk serve` replicas
behind sglang-router), then the tests' workload (tests/fleet/fleet_check.py:
8 shared system prompts, 5 questions each, greedy) sent as streaming
/generate requests from --concurrency clients through the router. Prints per
policy the prefix-cache hit rate (hit tokens over looked-up tokens, summed
from the replicas' /metrics), the mean and p90 time to first token seen by
the clients, and how the requests spread over the replicas. A per-replica KV
capacity below what all 8 prompts need is where routing matters
(--system-repeat lengthens the shared prefixes).
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
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fleet"))
from fleet import Fleet, have_router, stream_generate  # noqa: E402
from fleet_check import MAX_TOKENS, QUESTIONS, SYSTEM_PROMPTS, prefix_counts, requests_served  # noqa: E402


def run_policy(a, policy):
    serve_args = ["--set", "plugins.kv_allocator=kv.paged", "--set", f"kv_cache.capacity_tokens={a.capacity_tokens}",
                  "--set", "executor.num_threads=1"]
    with Fleet(a.llmk, a.model, a.replicas, "sglang", policy, serve_args=serve_args) as fleet:
        rng = random.Random(0)
        plist = [" ".join([s] * a.system_repeat) + q for s in SYSTEM_PROMPTS for q in QUESTIONS]
        chosen = [plist[rng.randrange(len(plist))] for _ in range(a.requests)]
        q0, h0 = prefix_counts(fleet)
        t0 = time.monotonic()
        with futures.ThreadPoolExecutor(a.concurrency) as pool:
            ttfts = list(pool.map(lambda p: stream_generate(fleet.router_port, p, MAX_TOKENS, timeout=120)[0], chosen))
        wall = time.monotonic() - t0
        q1, h1 = prefix_counts(fleet)
        served = [int(requests_served(r)) for r in fleet.replicas]
    ttfts.sort()
    return {"policy": policy, "prefix_hit_rate": (h1 - h0) / max(1.0, q1 - q0),
            "mean_ttft_ms": 1000 * statistics.mean(ttfts), "p90_ttft_ms": 1000 * ttfts[int(0.9 * (len(ttfts) - 1))],
            "requests_per_replica": served, "wall_s": wall}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--llmk", default=os.path.join(HERE, "..", "build", "bin", "llmk"))
    p.add_argument("--model", required=True)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--capacity-tokens", type=int, default=1024, help="each replica's kv_cache.capacity_tokens")
    p.add_argument("--policies", nargs="+", default=["cache_aware", "round_robin"])
    p.add_argument("--system-repeat", type=int, default=1,
                   help="each system prompt this many times over (longer shared prefixes)")
    a = p.parse_args()
    if not have_router("sglang"):
        sys.exit("router_prefix_cache: sglang-router is not installed (scripts/setup.sh installs it into .venv)")
    print(f"{a.replicas} replicas, {a.requests} requests, {a.concurrency} clients, "
          f"{a.capacity_tokens} KV tokens per replica, system prompts x{a.system_repeat}")
    print(f"{'policy':<12} {'prefix hit rate':>15} {'mean TTFT ms':>13} {'p90 TTFT ms':>12}  requests per replica")
    for policy in a.policies:
        r = run_policy(a, policy)
        print(f"{r['policy']:<12} {r['prefix_hit_rate']:>15.3f} {r['mean_ttft_ms']:>13.1f} {r['p90_ttft_ms']:>12.1f}"
              f"  {r['requests_per_replica']}", flush=True)


if __name__ == "__main__":
    main()
