#!/usr/bin/env python3
"""A local fleet: N `llmk serve` replicas behind sglang-router or vllm-router.

    scripts/fleet.py --model DIR [--replicas 3] [--router sglang|vllm|none]
                     [--policy cache_aware] [--port 30000] [-- extra llmk serve args]
    scripts/fleet.py --model DIR --prefill 1 --decode 1 [...]

With --prefill P --decode D the fleet is disaggregated: P prefill and D
decode replicas behind sglang-router --pd-disaggregation (docs/replicas.md).

Starts the replicas on free loopback ports (replica i is named replica-i in
its metrics), waits until each answers /health, then starts the router on
--port and waits until it sees every replica healthy. Prints the URLs and
runs until SIGINT or SIGTERM, then stops the router and drains the replicas
(SIGTERM; each exits 0 once its live requests finish). The tests
(tests/fleet) and the benchmark (bench/router_prefix_cache.py) use the
Fleet class below.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from http.client import HTTPConnection

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, timeout=60):
    """(status, parsed JSON or text); status 0 when the connection failed."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, socket.timeout) as e:
        return 0, str(e)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def stream_generate(port, prompt, max_tokens, ignore_eos=False, timeout=600):
    """(ttft_s, e2e_s, output tokens, text) of one streaming greedy /generate
    on 127.0.0.1:port; the first token is the first chunk carrying output."""
    conn = HTTPConnection("127.0.0.1", port, timeout=timeout)
    params = {"max_new_tokens": max_tokens, "temperature": 0}
    if ignore_eos:
        params["ignore_eos"] = True
    t0 = time.monotonic()
    conn.request("POST", "/generate", json.dumps({"text": prompt, "stream": True, "sampling_params": params}),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"/generate answered {resp.status}: {resp.read()[:300]}")
    ttft, text, tokens = None, "", 0
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if ttft is None and (chunk.get("output_ids") or chunk.get("text")):
            ttft = time.monotonic() - t0
        text = chunk.get("text", text)
        tokens = len(chunk.get("output_ids", [])) or tokens
    e2e = time.monotonic() - t0
    conn.close()
    return (ttft if ttft is not None else e2e), e2e, tokens, text


def wait_until(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout_s} s waiting for {what}")


def router_python():
    """$LLMK_ROUTER_PYTHON, else the project venv's Python, else this one."""
    if os.environ.get("LLMK_ROUTER_PYTHON"):
        return os.environ["LLMK_ROUTER_PYTHON"]
    venv = os.path.join(ROOT, ".venv", "bin", "python")
    return venv if os.path.exists(venv) else sys.executable


def have_router(kind, python=None):
    module = {"sglang": "sglang_router", "vllm": "vllm_router"}[kind]
    r = subprocess.run([python or router_python(), "-c", f"import {module}"], capture_output=True)
    return r.returncode == 0


class Replica:
    def __init__(self, llmk, model, port, name, extra_args, log_dir, role=None, launcher=()):
        self.port, self.name, self.role = port, name, role
        self.url = f"http://127.0.0.1:{port}"
        self.args = list(launcher) + [llmk, "serve", "--model", model, "--http", f"127.0.0.1:{port}", "--no-zmq",
                     "--set", f"server.replica_name={name}"] + list(extra_args)
        # Prefill/decode disaggregation: a prefill replica serves its K/V on a
        # bootstrap port of its own, which the router is told.
        self.bootstrap_port = free_port() if role == "prefill" else None
        if role:
            self.args += ["--set", f"disaggregation.mode={role}"]
        if self.bootstrap_port:
            self.args += ["--set", f"disaggregation.bootstrap_port={self.bootstrap_port}"]
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.proc = None

    def start(self):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_healthy(self, timeout_s=60):
        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.tail()}")
            return http("GET", self.url + "/health", timeout=2)[0] == 200
        wait_until(ready, timeout_s, f"{self.name} on {self.url}")

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self, timeout_s=30):
        """SIGTERM (drain) and wait; the exit status, or None when it had to be killed."""
        if not self.proc:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        self.log.close()
        return self.proc.returncode

    def metrics(self):
        """{(name, labels without replica): value} from /metrics."""
        status, text = http("GET", self.url + "/metrics", timeout=5)
        out = {}
        if status != 200:
            return out
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
        return out

    def tail(self, n=2000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""


class Fleet:
    """Replicas plus (optionally) a router; a context manager that stops all."""

    def __init__(self, llmk, model, num_replicas=3, router="sglang", policy="cache_aware", router_port=None,
                 serve_args=(), router_args=(), python=None, roles=None, launcher=(),
                 keep_logs=False):
        """roles: None, or one of "prefill"/"decode" per replica for a
        disaggregated fleet (sglang-router --pd-disaggregation). launcher:
        a command each replica runs under (e.g. mpirun -np 2 for tensor 2).
        keep_logs: leave the log folder in place after a clean exit too."""
        self.log_dir = tempfile.mkdtemp(prefix="llmk_fleet_")
        self.keep_logs = keep_logs
        roles = list(roles) if roles else [None] * num_replicas
        if len(roles) != num_replicas:
            raise ValueError(f"{len(roles)} roles for {num_replicas} replicas")
        self.pd = any(roles)
        self.replicas = [Replica(llmk, model, free_port(), f"{role or 'replica'}-{i}", serve_args, self.log_dir, role,
                                 launcher)
                         for i, role in enumerate(roles)]
        self.router_kind, self.policy = router, policy
        self.router_port = router_port or free_port()
        self.router_url = f"http://127.0.0.1:{self.router_port}"
        self.router_args = list(router_args)
        self.python = python or router_python()
        self.router = None

    def start(self):
        for r in self.replicas:
            r.start()
        for r in self.replicas:
            r.wait_healthy()
        if self.router_kind != "none":
            self.start_router()
        return self

    def start_router(self, timeout_s=60):
        module = {"sglang": "sglang_router.launch_router", "vllm": "vllm_router.launch_router"}[self.router_kind]
        args = [self.python, "-m", module, "--host", "127.0.0.1", "--port", str(self.router_port)]
        if self.pd:
            args += ["--pd-disaggregation"]
            for r in self.replicas:
                args += ["--prefill", r.url, str(r.bootstrap_port)] if r.role == "prefill" else ["--decode", r.url]
        else:
            args += ["--worker-urls"] + [r.url for r in self.replicas]
        args += ["--policy", self.policy]
        # Both routers export Prometheus metrics on a fixed port (29000) by
        # default: a port of its own lets several fleets run side by side.
        if "--prometheus-port" not in self.router_args:
            args += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
        args += self.router_args
        self.router_log_path = os.path.join(self.log_dir, "router.log")
        self.router_log = open(self.router_log_path, "ab")
        self.router = subprocess.Popen(args, stdout=self.router_log, stderr=subprocess.STDOUT)

        def ready():
            if self.router.poll() is not None:
                raise RuntimeError(f"the router exited with {self.router.returncode}: {self.router_tail()}")
            return self.num_healthy_workers() == len(self.replicas)
        wait_until(ready, timeout_s, f"{self.router_kind}-router on {self.router_url} to see every replica")

    def num_healthy_workers(self):
        if self.router_kind == "sglang":
            status, body = http("GET", self.router_url + "/readiness", timeout=2)
            return body.get("healthy_workers", 0) if status == 200 and isinstance(body, dict) else 0
        # vllm-router listens only once every worker is healthy.
        return len(self.replicas) if http("GET", self.router_url + "/health", timeout=2)[0] == 200 else 0

    def router_tail(self, n=3000):
        try:
            with open(self.router_log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except (OSError, AttributeError):
            return ""

    def stop(self):
        """Stops the router, then drains every replica; their exit statuses."""
        if self.router and self.router.poll() is None:
            self.router.send_signal(signal.SIGTERM)
            try:
                self.router.wait(15)
            except subprocess.TimeoutExpired:
                self.router.kill()
                self.router.wait()
        return [r.stop() for r in self.replicas]

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, exc_type, exc, tb):
        self.stop()
        # The logs are kept only where something went wrong (the block
        # raised), so a fleet that ends cleanly leaves nothing in /tmp.
        if exc_type is None and not self.keep_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--llmk", default=os.path.join(ROOT, "build", "bin", "llmk"))
    p.add_argument("--model", required=True, help="model directory or .gguf file")
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--router", choices=["sglang", "vllm", "none"], default="sglang")
    p.add_argument("--policy", default="cache_aware")
    p.add_argument("--port", type=int, default=30000, help="the router's port")
    p.add_argument("--prefill", type=int, default=0, help="prefill replicas (with --decode: a disaggregated fleet)")
    p.add_argument("--decode", type=int, default=0, help="decode replicas")
    p.add_argument("serve_args", nargs=argparse.REMAINDER, help="after --: extra `llmk serve` arguments")
    a = p.parse_args()
    serve_args = a.serve_args[1:] if a.serve_args[:1] == ["--"] else a.serve_args
    if a.router != "none" and not have_router(a.router):
        sys.exit(f"fleet: the {a.router} router is not installed for {router_python()} (scripts/setup.sh installs it)")
    roles = None
    if a.prefill or a.decode:
        if not (a.prefill and a.decode) or a.router != "sglang":
            sys.exit("fleet: a disaggregated fleet needs --prefill N and --decode M (N, M >= 1) behind --router sglang")
        roles = ["prefill"] * a.prefill + ["decode"] * a.decode
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    fleet = Fleet(a.llmk, a.model, len(roles) if roles else a.replicas, a.router, a.policy, a.port, serve_args,
                  roles=roles, keep_logs=True)
    with fleet:
        for r in fleet.replicas:
            print(f"{r.name}: {r.url} (log {r.log_path})", flush=True)
        if fleet.router:
            print(f"{a.router}-router ({a.policy}): {fleet.router_url} (log {fleet.router_log_path})", flush=True)
        print("fleet: ready; Ctrl-C stops it", flush=True)
        try:
            while not stop:
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass
        print("fleet: stopping", flush=True)
    print("fleet: replicas exited with " + ", ".join(str(r.proc.returncode) for r in fleet.replicas), flush=True)


if __name__ == "__main__":
    main()
