#!/usr/bin/python3
"""Drives llmk's OpenAI-compatible HTTP API with urllib only, parsing the
server-sent events by hand, and prints one JSON object with what it got.

    http_sse_client.py PORT PROMPT MAX_TOKENS
"""
import json
import sys
import urllib.error
import urllib.request


def post(port, path, body):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


def sse_events(raw):
    """The data payloads of an SSE stream ('data: ...' lines, events end with a blank line)."""
    events = []
    for block in raw.decode("utf-8").split("\n\n"):
        data = [line[6:] for line in block.split("\n") if line.startswith("data: ")]
        if data:
            events.append("\n".join(data))
    return events


def main():
    port, prompt, max_tokens = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    out = {}
    status, _, body = post(port, "/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    out["completion_status"] = status
    out["completion"] = json.loads(body)["choices"][0]["text"]

    status, ctype, body = post(port, "/v1/completions", {
        "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True}})
    events = sse_events(body)
    out["stream_status"] = status
    out["stream_content_type"] = ctype
    out["stream_done"] = events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events if e != "[DONE]"]
    out["stream_text"] = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    out["stream_usage"] = chunks[-1].get("usage")

    status, _, body = post(port, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0,
        "stream": True})
    chunks = [json.loads(e) for e in sse_events(body) if e != "[DONE]"]
    out["chat_status"] = status
    out["chat_role"] = chunks[0]["choices"][0]["delta"].get("role") if chunks else None
    out["chat_text"] = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])

    status, _, body = post(port, "/v1/completions", {"prompt": prompt, "max_tokens": -1})
    out["bad_status"] = status
    out["bad_error"] = json.loads(body)["error"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
