"""Structured outputs' cost in serving: the mean time between streamed
tokens (the decode step as a client sees it) for concurrent chat requests
with a strict json_schema response_format, against the same requests
without one, through the openai SDK.

    .venv/bin/python bench/structured_outputs.py --url http://127.0.0.1:8000 [--concurrency 1 32] [--requests 32]

Start the server first, e.g. `build/bin/llmk serve --model SmolLM2.gguf
--http 127.0.0.1:8000 --no-zmq`. Greedy; unconstrained requests use
ignore_eos so that both kinds run about as many steps.
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


def one(client, model, i, constrained, max_tokens):
    kwargs = {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA,
                                                                          "strict": True}}} if constrained else {
        "extra_body": {"ignore_eos": True}}
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
        json.loads(text)
    return [b - a for a, b in zip(times, times[1:])]


def run(client, model, concurrency, num_requests, constrained, max_tokens):
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        gaps = [g for r in pool.map(lambda i: one(client, model, i, constrained, max_tokens), range(num_requests))
                for g in r]
    return statistics.mean(gaps) * 1000, len(gaps)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=64)
    a = p.parse_args()
    client = openai.OpenAI(base_url=a.url.rstrip("/") + "/v1", api_key="-", max_retries=0, timeout=600)
    model = client.models.list().data[0].id
    run(client, model, 1, 1, True, 8)  # compiles the schema once (cached by text)
    for c in a.concurrency:
        n = max(c, a.requests if c > 1 else 4)
        free, nf = run(client, model, c, n, False, a.max_tokens)
        masked, nm = run(client, model, c, n, True, a.max_tokens)
        print(f"concurrency {c}: {free:.2f} ms/token unconstrained ({nf} gaps), {masked:.2f} ms/token json_schema "
              f"({nm} gaps): +{masked - free:.2f} ms ({(masked / free - 1) * 100:+.1f}%)", flush=True)


if __name__ == "__main__":
    main()
