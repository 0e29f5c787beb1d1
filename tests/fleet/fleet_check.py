#!/usr/bin/env python3
"""Acceptance checks of llmk replicas behind the routers users deploy.

    fleet_check.py CASE --llmk BIN --model DIR

CASE is one of:
  sglang-cache-aware  three replicas behind sglang-router --policy cache_aware;
                      300 greedy requests over 8 shared system prompts, half
                      through SGLang's /generate, half through /v1/completions:
                      every answer equals the replicas' own greedy text; the
                      router's POST /flush_cache reaches every replica.
  vllm-smoke          the same fleet behind vllm-router (power_of_two): its
                      start-up probes, then 24 requests over /generate and
                      /v1/completions, and its /flush_cache.
  failover            kill -9 of one replica mid-run behind sglang-router:
                      only requests in flight on it may fail, every request
                      is answered or refused (none lost), the router stops
                      sending to it, and once restarted on its port it
                      rejoins and serves.
  chat                with a chat model (SmolLM2): /v1/chat/completions through
                      each router answers what a replica answers directly.
  drain               SIGTERM to one replica mid-run behind sglang-router:
                      no client sees a failure, the replica exits 0.
  pd                  a prefill and a decode replica behind sglang-router
                      --pd-disaggregation: the golden prompts and the shared-
                      prefix prompts over /generate, /v1/completions and a
                      stream answer the greedy text one replica gives; every
                      request's prompt K/V was handed off (the decode replica
                      computed no prompt); with the prefill replica gone, a
                      request is answered 503 (not left waiting).
  pd-tensor           the same pair, each replica a tensor-parallel job of
                      two ranks under mpirun: the golden prompts' answers
                      equal one replica's, every request handed off.
Prints one JSON object of figures; exits 1 with the reason on a failed check.
The reference for every answer is the text a replica gives when asked
directly (all three must agree), so no router can make a wrong answer pass.
"""
import argparse
import concurrent.futures as futures
import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from fleet import Fleet, http, wait_until  # noqa: E402

SYSTEM_PROMPTS = [
    "Once upon a time there was a little girl named Lily who loved to play in the park with her red ball.",
    "Tom had a big dog called Max. Every morning they walked to the river and looked at the fish swim.",
    "The sun was hot and the sky was blue. A small bird sat on the tree and sang a happy song all day.",
    "Sara wanted to bake a cake for her mom. She took flour, eggs and sugar and put them in a big bowl.",
    "In a tiny house near the forest lived an old man and his cat. They liked to sit by the warm fire.",
    "Ben found a shiny box under his bed. He opened it slowly and saw a map with a big red cross on it.",
    "The little boat was sad because it could not sail. The wind was gone and the sea was very still.",
    "Mia and her friend Sam built a tall tower of blocks. They were very proud and clapped their hands.",
]
QUESTIONS = [" One day,", " Then she said,", " The next day", " Suddenly,", " After that,"]
MAX_TOKENS = 12
LONG_TOKENS = 96  # failover and drain: the kill and the drain land on requests mid-generation
SERVE_ARGS = ["--set", "plugins.kv_allocator=kv.paged", "--set", "kv_cache.capacity_tokens=8192",
              "--set", "executor.num_threads=1",
              "--set", "server.drain_timeout_s=10"]


class CheckFailed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


def generate(base, prompt, endpoint, timeout=60, max_tokens=MAX_TOKENS):
    """(status, text or error) of one greedy request."""
    if endpoint == "generate":
        status, body = http("POST", base + "/generate", {
            "text": prompt, "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0}}, timeout)
        return (status, body["text"]) if status == 200 else (status, body)
    status, body = http("POST", base + "/v1/completions", {
        "model": "stories260K", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}, timeout)
    return (status, body["choices"][0]["text"]) if status == 200 else (status, body)


def prompts():
    return [s + q for s in SYSTEM_PROMPTS for q in QUESTIONS]


def references(fleet, texts, max_tokens=MAX_TOKENS):
    """Each prompt's greedy text from every replica directly; they must agree."""
    ref = {}
    for p in texts:
        answers = {r.name: generate(r.url, p, "generate", max_tokens=max_tokens) for r in fleet.replicas}
        for name, (status, text) in answers.items():
            check(status == 200, f"{name} refused a reference prompt: {status} {text}")
        check(len({t for _, t in answers.values()}) == 1, f"replicas disagree on {p!r}: {answers}")
        ref[p] = next(iter(answers.values()))[1]
    return ref


def prefix_counts(fleet):
    """(query tokens, hit tokens) summed over the replicas' /metrics."""
    q = h = 0.0
    for r in fleet.replicas:
        for key, v in r.metrics().items():
            if key.startswith("llmk_prefix_cache_query_tokens_total"):
                q += v
            elif key.startswith("llmk_prefix_cache_hit_tokens_total"):
                h += v
    return q, h


def requests_served(replica):
    return sum(v for k, v in replica.metrics().items() if k.startswith("llmk_requests_total{"))


def run_workload(base, ref, num_requests, concurrency, order_seed=0):
    """Sends num_requests greedy requests (prompts in a fixed shuffled order,
    endpoints alternating); returns [(index, prompt, status, text, ttft_s)]."""
    import random
    rng = random.Random(order_seed)
    plist = list(ref)
    chosen = [plist[rng.randrange(len(plist))] for _ in range(num_requests)]

    def one(i):
        t0 = time.monotonic()
        status, text = generate(base, chosen[i], "generate" if i % 2 == 0 else "completions")
        return i, chosen[i], status, text, time.monotonic() - t0

    with futures.ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, range(num_requests)))


def case_cache_aware(a):
    with Fleet(a.llmk, a.model, 3, "sglang", "cache_aware", serve_args=SERVE_ARGS) as fleet:
        ref = references(fleet, prompts())
        q0, h0 = prefix_counts(fleet)
        served0 = [requests_served(r) for r in fleet.replicas]
        results = run_workload(fleet.router_url, ref, 300, 8)
        wrong = [(p, s, t) for _, p, s, t, _ in results if s != 200 or t != ref[p]]
        check(not wrong, f"{len(wrong)} of 300 answers through the router differ from the replicas' greedy text, "
                         f"e.g. {wrong[:2]}")
        q1, h1 = prefix_counts(fleet)
        served = [requests_served(r) - s for r, s in zip(fleet.replicas, served0)]
        # The router's load monitor reads each replica's /get_load (-1: it could not).
        status, loads = http("GET", fleet.router_url + "/get_loads")
        check(status == 200 and len(loads.get("workers", [])) == 3 and all(w["load"] >= 0 for w in loads["workers"]),
              f"sglang-router could not read the replicas' loads: {status} {loads}")
        check(sum(served) == 300, f"the replicas served {served} requests, not 300 in all")
        # The router sends its /flush_cache to every replica, bodiless: each
        # flushes the blocks the workload cached (its hits show there were
        # some), so none has an unheld block left to drop afterwards.
        check(h1 > h0, "the workload got no prefix-cache hit")
        status, body = http("POST", fleet.router_url + "/flush_cache")
        check(status == 200, f"/flush_cache via sglang-router: {status} {body}")
        left = [http("POST", r.url + "/flush_cache")[1] for r in fleet.replicas]
        check(all(isinstance(b, dict) and b.get("num_dropped_blocks") == 0 for b in left),
              f"replicas still held cached blocks after the router's flush: {left}")
        statuses = fleet.stop()
        check(statuses == [0, 0, 0], f"replicas exited with {statuses} after SIGTERM, not 0")
        return {"requests": 300, "per_replica": served, "prefix_hit_rate": (h1 - h0) / max(1.0, q1 - q0)}


def case_vllm_smoke(a):
    # power_of_two: vllm-router's load monitor reads every replica's /get_load.
    with Fleet(a.llmk, a.model, 3, "vllm", "power_of_two", serve_args=SERVE_ARGS) as fleet:
        ref = references(fleet, prompts()[:6])
        results = run_workload(fleet.router_url, ref, 24, 4)
        wrong = [(p, s, t) for _, p, s, t, _ in results if s != 200 or t != ref[p]]
        check(not wrong, f"{len(wrong)} of 24 answers through vllm-router are wrong, e.g. {wrong[:2]}")
        status, info = http("GET", fleet.router_url + "/get_model_info")
        check(status == 200 and info.get("is_generation") is True, f"/get_model_info via the router: {status} {info}")
        status, body = http("GET", fleet.router_url + "/health_generate")
        check(status == 200, f"/health_generate via the router: {status} {body}")
        status, body = http("POST", fleet.router_url + "/flush_cache")
        check(status == 200, f"/flush_cache via vllm-router: {status} {body}")
        left = [http("POST", r.url + "/flush_cache")[1] for r in fleet.replicas]
        check(all(isinstance(b, dict) and b.get("num_dropped_blocks") == 0 for b in left),
              f"replicas still held cached blocks after vllm-router's flush: {left}")
        return {"requests": 24}


def case_failover(a):
    # Health checked every second; one failure marks a worker unhealthy, one
    # success brings it back; the circuit breaker of a failed worker half-opens
    # after 1 s (60 s by default). The router's own retries stay on (its default).
    router_args = ["--health-check-interval-secs", "1", "--health-failure-threshold", "1",
                   "--health-success-threshold", "1", "--health-check-timeout-secs", "1",
                   "--cb-timeout-duration-secs", "1", "--worker-startup-timeout-secs", "30"]
    serve_args = SERVE_ARGS
    with Fleet(a.llmk, a.model, 3, "sglang", "round_robin", serve_args=serve_args, router_args=router_args) as fleet:
        ref = references(fleet, prompts()[:10], LONG_TOKENS)
        victim = fleet.replicas[2]
        plist = list(ref)
        concurrency = 6
        outcomes = []  # (phase, prompt, status, text)
        lock = threading.Lock()
        phase = ["before"]
        stop = threading.Event()

        def client(k):
            i = k
            while not stop.is_set():
                p = plist[i % len(plist)]
                i += concurrency
                current = phase[0]
                status, text = generate(fleet.router_url, p, "generate", timeout=30, max_tokens=LONG_TOKENS)
                with lock:
                    outcomes.append((current, p, status, text))

        threads = [threading.Thread(target=client, args=(k,)) for k in range(concurrency)]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: len(outcomes) >= 30, 60, "30 answers before the kill")
            running_at_kill = sum(v for k, v in victim.metrics().items() if k.startswith("llmk_num_requests_running"))
            victim.kill()
            victim.proc.wait()
            phase[0] = "down"
            t_kill = time.monotonic()
            # The router notices within a few health checks; after that nothing may fail.
            wait_until(lambda: fleet.num_healthy_workers() == 2, 15, "the router to drop the killed replica")
            phase[0] = "dropped"
            t_drop = time.monotonic()
            time.sleep(1)
            victim.start()
            victim.wait_healthy()
            wait_until(lambda: fleet.num_healthy_workers() == 3, 20, "the restarted replica to rejoin")
            phase[0] = "rejoined"
            wait_until(lambda: requests_served(victim) >= 5, 30, "the restarted replica to serve 5 requests")
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        check(not any(t.is_alive() for t in threads), "a client is still waiting: a request was lost")
        failed = [(ph, s, t) for ph, p, s, t in outcomes if s != 200]
        wrong = [(ph, p, t) for ph, p, s, t in outcomes if s == 200 and t != ref[p]]
        check(not wrong, f"{len(wrong)} answers differ from the greedy text, e.g. {wrong[:2]}")
        failed_after_drop = [f for f in failed if f[0] in ("dropped", "rejoined")]
        check(not failed_after_drop, f"requests failed after the router dropped the replica: {failed_after_drop[:3]}")
        # At most one request per client can be in flight on the replica when it dies.
        check(len(failed) <= concurrency,
              f"{len(failed)} requests failed, more than the {concurrency} that can be in flight: {failed[:3]}")
        # The router retries what the dead replica dropped, so "failed" is
        # usually 0 even with requests running there when it died.
        return {"requests": len(outcomes), "running_on_replica_at_kill": running_at_kill, "failed": len(failed),
                "failed_statuses": sorted({f[1] for f in failed}),
                "seconds_to_drop": round(t_drop - t_kill, 2), "served_after_rejoin": requests_served(victim)}


def case_drain(a):
    # A replica told to stop (SIGTERM) mid-run: its health turns 503 and it
    # refuses new requests with 503 while its live ones finish; the router's
    # retries send the refused ones elsewhere, so no client sees a failure,
    # and the replica exits 0.
    router_args = ["--health-check-interval-secs", "1", "--health-failure-threshold", "1",
                   "--worker-startup-timeout-secs", "30"]
    with Fleet(a.llmk, a.model, 3, "sglang", "round_robin", serve_args=SERVE_ARGS, router_args=router_args) as fleet:
        ref = references(fleet, prompts()[:10], LONG_TOKENS)
        victim = fleet.replicas[2]
        plist = list(ref)
        concurrency = 6
        outcomes = []
        lock = threading.Lock()
        stop = threading.Event()

        def client(k):
            i = k
            while not stop.is_set():
                p = plist[i % len(plist)]
                i += concurrency
                status, text = generate(fleet.router_url, p, "generate", timeout=30, max_tokens=LONG_TOKENS)
                with lock:
                    outcomes.append((p, status, text))

        threads = [threading.Thread(target=client, args=(k,)) for k in range(concurrency)]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: len(outcomes) >= 30, 60, "30 answers before the drain")
            served_before = requests_served(victim)
            check(served_before > 0, "the replica to drain served nothing before")
            victim.kill(signal.SIGTERM)
            code = victim.proc.wait(30)
            n_at_exit = len(outcomes)
            wait_until(lambda: len(outcomes) >= n_at_exit + 60, 60, "60 more answers from the other two")
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        check(not any(t.is_alive() for t in threads), "a client is still waiting: a request was lost")
        check(code == 0, f"the drained replica exited with {code}, not 0: {victim.tail()}")
        failed = [(s, t) for p, s, t in outcomes if s != 200]
        wrong = [(p, t) for p, s, t in outcomes if s == 200 and t != ref[p]]
        check(not failed, f"{len(failed)} requests failed during the drain, e.g. {failed[:3]}")
        check(not wrong, f"{len(wrong)} answers differ from the greedy text, e.g. {wrong[:2]}")
        return {"requests": len(outcomes), "failed": 0, "drained_replica_exit": code}


def case_chat(a):
    # --model: a model with a chat template (SmolLM2). The routers rewrite a
    # chat body (sglang-router: max_tokens -> max_completion_tokens, and both
    # add their own defaults); the answer must equal the replica's own.
    body = {"model": os.path.basename(a.model), "messages": [{"role": "user", "content": "Tell me about cats."}],
            "max_tokens": 10, "temperature": 0}
    results = {}
    for kind in ("sglang", "vllm"):
        with Fleet(a.llmk, a.model, 2, kind, "cache_aware", serve_args=["--set", "executor.num_threads=1"]) as fleet:
            direct = http("POST", fleet.replicas[0].url + "/v1/chat/completions", body)
            routed = http("POST", fleet.router_url + "/v1/chat/completions", body)
            check(direct[0] == 200, f"a replica refused the chat: {direct}")
            check(routed[0] == 200, f"the chat through {kind}-router failed: {routed}")
            text = routed[1]["choices"][0]["message"]["content"]
            check(text == direct[1]["choices"][0]["message"]["content"],
                  f"{kind}-router's chat answer {text!r} differs from the replica's {direct[1]}")
            results[kind] = text
    return {"chat": results}


def golden_prompts():
    """The text prompts of the stories260K golden vectors (../shared)."""
    here = os.path.dirname(os.path.abspath(__file__))
    shared = os.environ.get("LLMK_SHARED_DIR") or os.path.join(here, "..", "..", "..", "shared")
    with open(os.path.join(shared, "golden", "stories260K.json")) as f:
        return [c["prompt"] for c in json.load(f)["cases"] if c["prompt"]]


def stream_text(base, prompt, max_tokens=MAX_TOKENS):
    """(status, text) of one greedy streamed completion, the deltas joined."""
    import urllib.request
    body = json.dumps({"model": "stories260K", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True}).encode()
    req = urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            text = ""
            for line in resp.read().decode().splitlines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    text += "".join(c.get("text", "") for c in json.loads(line[6:]).get("choices", []))
            return resp.status, text
    except Exception as e:  # noqa: BLE001 - reported as the check's failure
        return getattr(e, "code", 0), str(e)


def handoffs(replica, direction):
    return sum(v for k, v in replica.metrics().items()
               if k.startswith("llmk_kv_handoffs_total{") and f'direction="{direction}"' in k)


def case_pd(a):
    serve_args = SERVE_ARGS + ["--set", "disaggregation.timeout_s=5"]
    with Fleet(a.llmk, a.model, 2, "sglang", "round_robin", serve_args=serve_args,
               roles=["prefill", "decode"]) as fleet:
        prefill, decode = fleet.replicas
        texts = golden_prompts() + prompts()[::5]
        ref = references(fleet, texts)  # each replica asked directly serves as a plain one
        prefill_tokens0 = sum(v for k, v in decode.metrics().items() if k.startswith("llmk_prefill_tokens_total"))
        results = run_workload(fleet.router_url, ref, 3 * len(texts), 4)
        wrong = [(p, s, t) for _, p, s, t, _ in results if s != 200 or t != ref[p]]
        check(not wrong, f"{len(wrong)} of {len(results)} disaggregated answers differ from one replica's, "
                         f"e.g. {wrong[:2]}")
        streamed = {p: stream_text(fleet.router_url, p) for p in golden_prompts()}
        bad = {p: r for p, r in streamed.items() if r != (200, ref[p])}
        check(not bad, f"streamed disaggregated answers differ: {bad}")
        n = len(results) + len(streamed)
        exported, imported = handoffs(prefill, "exported"), handoffs(decode, "imported")
        check(exported == n and imported == n, f"{n} requests, but {exported} handoffs exported and {imported} imported")
        prefill_tokens = sum(v for k, v in decode.metrics().items() if k.startswith("llmk_prefill_tokens_total"))
        check(prefill_tokens == prefill_tokens0,
              f"the decode replica computed {prefill_tokens - prefill_tokens0} prompt tokens itself")
        # The prefill replica gone: the decode replica answers 503 once its wait ends.
        prefill.kill()
        prefill.proc.wait()
        t0 = time.monotonic()
        status, body = http("POST", decode.url + "/generate", {
            "text": texts[0], "sampling_params": {"max_new_tokens": 4, "temperature": 0},
            "bootstrap_host": "127.0.0.1", "bootstrap_port": prefill.bootstrap_port, "bootstrap_room": 7}, 30)
        waited = time.monotonic() - t0
        check(status == 503, f"with the prefill replica gone the decode replica answered {status} {body}, not 503")
        check(waited < 15, f"the decode replica took {waited:.1f} s to give up (timeout_s is 5)")
        status, _ = generate(decode.url, texts[0], "generate")
        check(status == 200, "the decode replica stopped serving plain requests after a failed handoff")
        return {"requests": n, "handoffs": exported, "gave_up_after_s": round(waited, 1)}


def case_pd_tensor(a):
    mpirun = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none",
              "--mca", "btl_vader_single_copy_mechanism", "none", "-np", "2"]
    serve_args = SERVE_ARGS + ["--set", "parallel.tensor=2"]
    with Fleet(a.llmk, a.model, 1, "none", serve_args=SERVE_ARGS) as single:
        ref = references(single, golden_prompts())
    with Fleet(a.llmk, a.model, 2, "sglang", "round_robin", serve_args=serve_args, roles=["prefill", "decode"],
               launcher=mpirun) as fleet:
        prefill, decode = fleet.replicas
        results = run_workload(fleet.router_url, ref, 2 * len(ref), 2)
        wrong = [(p, s, t) for _, p, s, t, _ in results if s != 200 or t != ref[p]]
        check(not wrong, f"{len(wrong)} of {len(results)} answers of the tensor-2 pair differ from one replica's, "
                         f"e.g. {wrong[:2]}")
        exported, imported = handoffs(prefill, "exported"), handoffs(decode, "imported")
        check(exported == len(results) and imported == len(results),
              f"{len(results)} requests, but {exported} handoffs exported and {imported} imported")
        return {"requests": len(results), "handoffs": exported}


CASES = {"chat": case_chat, "pd": case_pd, "pd-tensor": case_pd_tensor, "sglang-cache-aware": case_cache_aware, "vllm-smoke": case_vllm_smoke, "failover": case_failover,
         "drain": case_drain}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("case", choices=sorted(CASES))
    p.add_argument("--llmk", required=True)
    p.add_argument("--model", required=True)
    a = p.parse_args()
    t0 = time.monotonic()
    try:
        result = CASES[a.case](a)
    except CheckFailed as e:
        print(f"FAILED {a.case}: {e}", flush=True)
        sys.exit(1)
    result["wall_s"] = round(time.monotonic() - t0, 1)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
