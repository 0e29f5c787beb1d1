"""Structured outputs' cost in serving: the mean time between streamed
tokens (the decode step as a client sees it) for concurrent chat requests
with a strict json_schema, against the same requests without one, through
the openai SDK. Both servers of a comparison serve the same GGUF file; run
this once against each, one after the other, on an otherwise idle machine.

    .venv/bin/python bench/structured_outputs.py --url http://127.0.0.1:8000 [--concurrency 1 32] [--requests 32]
    .venv/bin/python bench/structured_outputs.py --url http://127.0.0.1:8001 --server llama.cpp

Start the server first, e.g. `build/bin/llmk serve --model SmolLM2.gguf
--http 127.0.0.1:8000 --no-zmq`, or llama.cpp's `llama-server -m SmolLM2.gguf
--port 8001 -np 32 -c 32768 -t 2`. Greedy; unconstrained requests use
ignore_eos so that both kinds run about as many steps. llama.cpp is given
the schema as its own top-level `json_schema` field, which its server turns
into a GBNF grammar for its grammar sampler (the llama.cpp this was run
against ignores response_format's json_schema); every constrained reply is
parsed as JSON either way, so a server that ignored the schema would fail.
"""
import argparse
import concurrent.futures
import json
import statistics
import time

import openai

SCHEMA = {"type": "object", "required": ["name", "age", "tags", "address"], "properties": {
    "name": {"type": "string", "maxLength": 24},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"enum": ["a", "bb", "ccc"]}, "maxItems": 4},
    "address": {"type": "object", "required": ["city", "zip"], "properties": {
        "city": {"type": "string", "maxLength": 16}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}}}


def request_fields(server, constrained):
    if not constrained:
        return {"extra_body": {"ignore_eos": True}}
    if server == "llama.cpp":
        return {"extra_body": {"json_schema": SCHEMA}}
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA, "strict": True}}}


def one(client, model, i, constrained, max_tokens, server):
    kwargs = request_fields(server, constrained)
    times = []
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": f"Describe person number {i} as JSON."}],
        temperature=0, max_tokens=max_tokens, stream=True, **kwargs)
    text = ""
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            times.append(time.perf_counter())
            text += chunk.choices[0].delta.content
    if constrained:
        try:
            json.loads(text)
        except json.JSONDecodeError:
            # Cut by max_tokens inside the object: still JSON's beginning.
            if not text.lstrip().startswith("{"):
                raise
    return [b - a for a, b in zip(times, times[1:])]


def run(client, model, concurrency, num_requests, constrained, max_tokens, server):
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        gaps = [g for r in pool.map(lambda i: one(client, model, i, constrained, max_tokens, server),
                                    range(num_requests)) for g in r]
    return statistics.mean(gaps) * 1000, len(gaps)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--server", choices=["llmk", "llama.cpp"], default="llmk",
                   help="how the schema is sent: response_format (llmk), json_schema (llama.cpp)")
    a = p.parse_args()
    client = openai.OpenAI(base_url=a.url.rstrip("/") + "/v1", api_key="-", max_retries=0, timeout=600)
    model = client.models.list().data[0].id
    run(client, model, 1, 1, True, 8, a.server)  # compiles the schema once where it is cached
    for c in a.concurrency:
        n = max(c, a.requests if c > 1 else 4)
        free, nf = run(client, model, c, n, False, a.max_tokens, a.server)
        masked, nm = run(client, model, c, n, True, a.max_tokens, a.server)
        print(f"{a.server} concurrency {c}: {free:.2f} ms/token unconstrained ({nf} gaps), {masked:.2f} ms/token json_schema "
              f"({nm} gaps): +{masked - free:.2f} ms ({(masked / free - 1) * 100:+.1f}%)", flush=True)


if __name__ == "__main__":
    main()
