#!/usr/bin/env python3
"""Soak: `llmk serve` on llama-110m dummy weights under twice the load it can
sustain, with clients that vanish mid-stream, for a long time.

    bench/soak/soak.py [--duration 600] [--concurrency 1000] [--vanish 0.3]
        [--rate R] [--warmup 60] [--llmk build/bin/llmk] [-- extra llmk serve args]

Phases:
  1. ramp     closed-loop clients, 2, 4, 8, ... at a time, --ramp-step seconds
              each, until doubling them adds less than 10% to the completion
              rate: the rate of the last step that still added 10% is the
              sustainable one, the knee past which more clients only queue
              (or give it with --rate).
  2. warm-up  a burst of --concurrency two-token requests at once (every
              connection thread serves one, so each thread's stack is
              resident before the baseline), then --warmup seconds of the
              soak load; then wait until the server is idle and read its
              resident memory (/proc/PID/status VmRSS): the baseline.
  3. soak     --duration seconds of Poisson arrivals at twice the sustainable
              rate, at most --concurrency requests open at once (an arrival
              finding them all open is not sent, and counted). Half stream
              (SSE), half do not; --vanish of the clients close their socket
              without reading on: a streaming one after a random number of its
              tokens, a non-streaming one after a random wait.
  4. checks   once every answer is in: the server is up (process alive,
              /health 200); every request that was not abandoned on purpose
              got its tokens (all max_tokens of them, ignore_eos), a 429 or a
              503; /metrics says no sequence runs or waits and no KV slot is
              used; VmRSS, idle again, is within 5% of the baseline; SIGTERM
              then drains the server and it exits 0.
Exits 1 when a check fails. Standard library only (asyncio over raw
sockets, HTTP/1.1 with Connection: close).

The server gets --http-threads above --concurrency (one thread serves one open
connection), a KV cache of --kv-tokens slots touched at start
(kv_cache.prefault, so the KV pages are resident from the start and a rise in
memory is the server's own), and scheduler.max_queue = --max-queue (default
95% of --concurrency: the running sequences and a full queue hold nearly
--concurrency streams open, and the arrivals beyond them are answered 503).
"""
import argparse
import asyncio
import json
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORDS = ("the little girl saw a big red ball in the park and she ran to get it but a dog was there first "
         "so she sat down under a tree and looked at the sky where a bird flew over the river").split()


def log(msg):
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vm_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


def http_get(port, path, timeout=10):
    """(status, text); status 0 when the server could not be reached."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (OSError, urllib.error.URLError) as e:
        return 0, str(e)


def metric(text, name):
    """The value of an unlabelled-or-replica-labelled gauge in Prometheus text."""
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise RuntimeError(f"/metrics has no {name}")


class Counts:
    """What the clients saw, by outcome."""

    def __init__(self):
        self.outcomes = {}  # "tokens", "429", "503", "vanished", or a failure's description
        self.failures = []  # (kind, detail), the first few kept
        self.num_capped = 0  # arrivals not sent: --concurrency requests already open
        self.num_sent = 0
        self.in_flight = 0
        self.max_in_flight = 0

    def add(self, outcome, detail=""):
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if outcome not in ("tokens", "429", "503", "vanished") and len(self.failures) < 20:
            self.failures.append((outcome, detail[:300]))

    def num(self, outcome):
        return self.outcomes.get(outcome, 0)

    def num_failed(self):
        return sum(n for k, n in self.outcomes.items() if k not in ("tokens", "429", "503", "vanished"))


async def read_headers(reader):
    """(status, {lowercase name: value}) of an HTTP/1.1 response."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("connection closed before the status line")
    status = int(status_line.split()[1])
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers


async def read_body(reader, headers):
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out = b""
        async for chunk in chunks(reader):
            out += chunk
        return out
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    return await reader.read()


async def chunks(reader):
    """The chunks of a chunked body, in order, until the last one."""
    while True:
        size = int((await reader.readline()).split(b";")[0], 16)
        if size == 0:
            await reader.readline()
            return
        data = await reader.readexactly(size)
        await reader.readline()  # the CRLF after the chunk
        yield data


async def one_request(a, counts, rng, stream, vanish, max_tokens=None):
    """One client: sends a completion and classifies what came back."""
    max_tokens = max_tokens or a.max_tokens
    prompt = f"Story {rng.randrange(1 << 30)}: " + " ".join(rng.choice(WORDS) for _ in range(a.prompt_words))
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.8, "ignore_eos": True,
            "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    data = json.dumps(body).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{a.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()
    counts.in_flight += 1
    counts.max_in_flight = max(counts.max_in_flight, counts.in_flight)
    counts.num_sent += 1
    writer = None
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", a.port, limit=1 << 20)
        writer.write(head + data)
        await writer.drain()
        if vanish and not stream:
            # Gone after a random wait (queued or generating), answer unread.
            try:
                status, headers = await asyncio.wait_for(read_headers(reader), rng.uniform(0.05, 3.0))
            except asyncio.TimeoutError:
                writer.transport.abort()
                return counts.add("vanished")
        else:
            status, headers = await asyncio.wait_for(read_headers(reader), a.answer_timeout)
        if status in (429, 503):
            await asyncio.wait_for(read_body(reader, headers), a.answer_timeout)
            if "retry-after" not in headers:
                return counts.add(f"{status} without Retry-After")
            return counts.add(str(status))
        if status != 200:
            raw = await asyncio.wait_for(read_body(reader, headers), a.answer_timeout)
            return counts.add(f"status {status}", raw.decode(errors="replace"))
        if not stream:
            raw = await asyncio.wait_for(read_body(reader, headers), a.answer_timeout)
            got = json.loads(raw)["usage"]["completion_tokens"]
            if got != max_tokens:
                return counts.add("short answer", f"{got} of {max_tokens} tokens: {raw[:200]!r}")
            return counts.add("tokens")
        leave_after = rng.randint(1, max_tokens - 1) if vanish else None
        outcome = await asyncio.wait_for(read_stream(reader, max_tokens, leave_after), a.answer_timeout)
        if outcome == "vanished":
            writer.transport.abort()
        if isinstance(outcome, tuple):
            counts.add(*outcome)
        else:
            counts.add(outcome)
    except asyncio.TimeoutError:
        counts.add("no answer in time", f"{a.answer_timeout} s, stream={stream}")
    except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError, KeyError) as e:
        counts.add(f"connection failed: {type(e).__name__}", str(e))
    finally:
        counts.in_flight -= 1
        if writer is not None and not writer.transport.is_closing():
            writer.close()


async def read_stream(reader, max_tokens, leave_after):
    """Reads an SSE completion stream: "tokens", "vanished" (left after
    `leave_after` content chunks), or (failure, detail)."""
    pending, num_chunks, usage, done = b"", 0, None, False
    async for chunk in chunks(reader):
        pending += chunk
        while b"\n\n" in pending:
            event, pending = pending.split(b"\n\n", 1)
            if not event.startswith(b"data: "):
                continue  # ": keepalive"
            payload = event[6:]
            if payload == b"[DONE]":
                done = True
                continue
            msg = json.loads(payload)
            if "error" in msg:
                return ("error event", payload.decode(errors="replace"))
            if msg.get("usage"):
                usage = msg["usage"]
            if msg.get("choices"):
                num_chunks += 1
                if leave_after is not None and num_chunks >= leave_after:
                    return "vanished"
    if not done:
        return ("stream without [DONE]", "")
    if not usage or usage.get("completion_tokens") != max_tokens:
        return ("short stream", json.dumps(usage))
    return "tokens"


async def open_loop(a, counts, rate, seconds, seed):
    """Poisson arrivals at `rate` per second for `seconds`; waits for every answer."""
    rng = random.Random(seed)
    tasks = set()
    end = time.monotonic() + seconds
    next_arrival = time.monotonic()
    last_report = time.monotonic()
    while True:
        next_arrival += rng.expovariate(rate)
        if next_arrival >= end:
            break
        await asyncio.sleep(max(0.0, next_arrival - time.monotonic()))
        if counts.in_flight >= a.concurrency:
            counts.num_capped += 1
        else:
            t = asyncio.create_task(one_request(a, counts, random.Random(rng.random()), rng.random() < 0.5,
                                                rng.random() < a.vanish))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
        if time.monotonic() - last_report > 30:
            last_report = time.monotonic()
            log(f"  {int(end - time.monotonic())} s left: {counts.in_flight} open, sent {counts.num_sent}, "
                f"{json.dumps(counts.outcomes)}")
    if tasks:
        log(f"  arrivals over; waiting for {len(tasks)} open request(s)")
        await asyncio.gather(*tasks)


async def burst(a, counts, seed):
    """--concurrency requests at once, of two tokens each (the soak's mix of
    streaming and vanishing): every connection thread serves once."""
    rng = random.Random(seed)
    await asyncio.gather(*(one_request(a, counts, random.Random(rng.random()), rng.random() < 0.5,
                                       rng.random() < a.vanish, max_tokens=2) for _ in range(a.concurrency)))


async def closed_loop(a, num_clients, seconds, seed):
    """`num_clients` clients back to back for `seconds`: completions per second."""
    counts = Counts()
    end = time.monotonic() + seconds

    async def client(i):
        rng = random.Random(seed * 1000 + i)
        while time.monotonic() < end:
            await one_request(a, counts, rng, i % 2 == 0, False)

    await asyncio.gather(*(client(i) for i in range(num_clients)))
    return counts


def ramp(a):
    """The sustainable completion rate (requests/s): the knee of a concurrency ramp."""
    knee, knee_clients, clients = 0.0, 0, 2
    while clients <= a.concurrency:
        t0 = time.monotonic()
        counts = asyncio.run(closed_loop(a, clients, a.ramp_step, clients))
        rate = counts.num("tokens") / (time.monotonic() - t0)
        log(f"  ramp: {clients} clients: {rate:.2f} req/s, {json.dumps(counts.outcomes)}")
        if counts.num_failed():
            raise SystemExit(f"soak: the ramp failed at {clients} clients: {counts.failures[:3]}")
        if rate < knee * 1.1:
            break
        knee, knee_clients = rate, clients
        clients *= 2
    log(f"sustainable rate: {knee:.2f} req/s (at {knee_clients} clients)")
    return knee


def wait_idle(port, timeout_s=120):
    """Waits until nothing runs, waits or holds KV; the last /metrics values."""
    deadline = time.monotonic() + timeout_s
    while True:
        status, text = http_get(port, "/metrics")
        values = {}
        if status == 200:
            values = {k: metric(text, "llmk_" + k) for k in ("num_requests_running", "num_requests_waiting",
                                                            "kv_cache_used_slots", "kv_cache_usage_ratio")}
            if values["num_requests_running"] == values["num_requests_waiting"] == values["kv_cache_used_slots"] == 0:
                return values
        if time.monotonic() > deadline:
            return values
        time.sleep(0.5)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--llmk", default=os.path.join(ROOT, "build", "bin", "llmk"))
    p.add_argument("--preset", default="llama-110m", help="dummy-weight preset")
    p.add_argument("--duration", type=float, default=600, help="seconds of soak")
    p.add_argument("--warmup", type=float, default=60, help="seconds of the soak load before the baseline")
    p.add_argument("--concurrency", type=int, default=1000, help="requests open at once, at most")
    p.add_argument("--vanish", type=float, default=0.3, help="fraction of clients that leave mid-answer")
    p.add_argument("--rate", type=float, default=0, help="the sustainable rate in req/s (0: measure it)")
    p.add_argument("--ramp-step", type=float, default=10, help="seconds per ramp step")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--prompt-words", type=int, default=24)
    p.add_argument("--threads", type=int, default=2, help="the server's compute threads")
    p.add_argument("--kv-tokens", type=int, default=8192, help="KV cache slots")
    p.add_argument("--max-queue", type=int, default=0, help="scheduler.max_queue (0: 95%% of --concurrency)")
    p.add_argument("--answer-timeout", type=float, default=600, help="seconds a client waits for its answer")
    p.add_argument("--rss-limit", type=float, default=0.05, help="allowed VmRSS change, end against baseline")
    p.add_argument("serve_args", nargs="*", help="more llmk serve arguments (after --)")
    a = p.parse_args()
    if a.max_tokens < 2:
        p.error("--max-tokens must be at least 2 (a streaming client vanishes between two tokens)")
    if not os.path.exists(a.llmk):
        sys.exit(f"soak: no llmk binary at {a.llmk} (build it, or give --llmk)")

    # One descriptor per client connection here, and one per connection in the server.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 4 * a.concurrency + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if want < 2 * a.concurrency + 64:
        sys.exit(f"soak: {a.concurrency} connections need more open files than the limit of {hard}")

    a.max_queue = a.max_queue or max(1, a.concurrency * 95 // 100)
    a.port = free_port()
    cmd = [a.llmk, "serve", "--load-format", "dummy", "--preset", a.preset, "--http", f"127.0.0.1:{a.port}",
           "--no-zmq", "--threads", str(a.threads), "--http-threads", str(a.concurrency + 32),
           "--set", f"kv_cache.capacity_tokens={a.kv_tokens}", "--set", "kv_cache.prefault=true",
           "--set", f"scheduler.max_queue={a.max_queue}"] + a.serve_args
    server_log = tempfile.NamedTemporaryFile(prefix="llmk_soak_", suffix=".log", delete=False)
    log(f"server: {' '.join(cmd)} (log {server_log.name})")
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "passive"))
    proc = subprocess.Popen(cmd, stdout=server_log, stderr=subprocess.STDOUT, env=env)
    checks = []
    try:
        deadline = time.monotonic() + 120
        while http_get(a.port, "/health", timeout=2)[0] != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"soak: the server did not start (exit {proc.poll()}); see {server_log.name}")
            time.sleep(0.2)
        log(f"server up, pid {proc.pid}, VmRSS {vm_rss_kib(proc.pid) / 1024:.1f} MiB")

        sustainable = a.rate or ramp(a)
        if sustainable <= 0:
            sys.exit("soak: no request completed during the ramp")
        rate = 2 * sustainable
        log(f"warm-up: a burst of {a.concurrency} two-token requests, then {a.warmup:.0f} s at {rate:.2f} req/s "
            f"(twice the sustainable rate), up to {a.concurrency} open, {a.vanish:.0%} vanishing")
        warm = Counts()
        asyncio.run(burst(a, warm, 1))
        log(f"  burst: {json.dumps(warm.outcomes)}")
        asyncio.run(open_loop(a, warm, rate, a.warmup, 1))
        idle = wait_idle(a.port)
        rss_start = vm_rss_kib(proc.pid)
        log(f"warm-up done: {json.dumps(warm.outcomes)}; idle {json.dumps(idle)}; "
            f"baseline VmRSS {rss_start / 1024:.1f} MiB")

        log(f"soak: {a.duration:.0f} s at {rate:.2f} req/s")
        counts = Counts()
        t0 = time.monotonic()
        asyncio.run(open_loop(a, counts, rate, a.duration, 2))
        wall = time.monotonic() - t0
        idle = wait_idle(a.port)
        up = proc.poll() is None and http_get(a.port, "/health")[0] == 200
        rss_end = vm_rss_kib(proc.pid) if proc.poll() is None else 0

        num_answered = counts.num("tokens") + counts.num("429") + counts.num("503")
        print()
        print(f"soak: {a.duration:.0f} s on {a.preset} dummy weights, {a.threads} compute threads; sustainable "
              f"{sustainable:.2f} req/s{' (given)' if a.rate else ' (ramp)'}, offered {rate:.2f} req/s; "
              f"{a.concurrency} streams at most, {a.vanish:.0%} vanishing; max_tokens {a.max_tokens}")
        print(f"requests sent {counts.num_sent} in {wall:.0f} s, at most {counts.max_in_flight} open at once "
              f"(arrivals not sent, {a.concurrency} open: {counts.num_capped})")
        print(f"  answered with tokens {counts.num('tokens')}, 429 {counts.num('429')}, 503 {counts.num('503')}; "
              f"vanished on purpose {counts.num('vanished')}; anything else {counts.num_failed()}")
        for kind, detail in counts.failures[:10]:
            print(f"    failure: {kind}: {detail}")
        print(f"  completed {counts.num('tokens') / wall:.2f} req/s, "
              f"{counts.num('tokens') * a.max_tokens / wall:.0f} tokens/s to clients that stayed")
        print(f"  at the end: running {idle.get('num_requests_running')}, waiting "
              f"{idle.get('num_requests_waiting')}, KV slots used {idle.get('kv_cache_used_slots')}, "
              f"reserved ratio {idle.get('kv_cache_usage_ratio')} (the prefix cache may keep blocks)")
        change = rss_end / rss_start - 1 if rss_start else float("inf")
        print(f"  VmRSS baseline {rss_start / 1024:.1f} MiB, end {rss_end / 1024:.1f} MiB: "
              f"{change:+.2%}, {abs(change) / a.rss_limit:.2f} of the {a.rss_limit:.0%} limit")
        checks = [
            ("server stayed up", up),
            ("every request answered with tokens, 429 or 503",
             counts.num_failed() == 0 and num_answered + counts.num("vanished") == counts.num_sent),
            ("all KV free at the end", bool(idle) and idle["kv_cache_used_slots"] == 0
             and idle["num_requests_running"] == 0 and idle["num_requests_waiting"] == 0),
            (f"VmRSS within {a.rss_limit:.0%} of the baseline", abs(change) <= a.rss_limit),
        ]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = None
            if checks:
                checks.append(("SIGTERM drains and exits 0", code == 0))
        elif checks:
            checks.append(("SIGTERM drains and exits 0", False))
    for name, ok in checks:
        print(f"  check: {name}: {'ok' if ok else 'FAILED'}")
    failed = [name for name, ok in checks if not ok]
    if failed:
        print(f"soak: {len(failed)} check(s) failed; server log: {server_log.name}")
        sys.exit(1)
    print("soak: all checks passed")
    os.unlink(server_log.name)


if __name__ == "__main__":
    main()
