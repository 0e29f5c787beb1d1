#!/usr/bin/env python3
"""A Python client for `llmk serve`'s ZeroMQ protocol v1 (docs/protocol.md).

Sends every prompt as its own request on one DEALER socket, all in flight at
once, and prints the streamed text as it arrives (or, with --json, one JSON
object: per request id its streamed text, the final text, finish reason and
usage). Needs pyzmq: the project venv has it (scripts/setup.sh), as has
Debian's python3-zmq.

    .venv/bin/python examples/zmq_client.py --endpoint tcp://127.0.0.1:5555 "Once upon a time"

The same works against `llmk broker --clients ...` in front of many replicas.

Against a CURVE server (server.auth.curve_secret_key_file), pass the server's
public key file and this client's key pair (files as `llmk keys curve --out
PREFIX` writes them: PREFIX.public, PREFIX.secret; the public key must be in
the server's curve_allowed_keys_file):

    .venv/bin/python examples/zmq_client.py --curve-server-key server.public \
        --curve-client-key client "Once upon a time"
"""
import argparse
import json
import sys
import time

import zmq


def read_key(path):
    """The first line of a key file that is not blank or a # comment (Z85)."""
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                return line.encode()
    raise SystemExit("%s holds no key" % path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("prompts", nargs="+")
    ap.add_argument("--endpoint", default="tcp://127.0.0.1:5555")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--no-stream", action="store_true")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds without a message before giving up")
    ap.add_argument("--json", action="store_true", help="print one JSON summary instead of the text")
    ap.add_argument("--curve-server-key", help="file with the server's CURVE public key (Z85)")
    ap.add_argument("--curve-client-key", help="PREFIX of this client's key pair: PREFIX.public, PREFIX.secret")
    args = ap.parse_args()

    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 200)
    if args.curve_server_key or args.curve_client_key:
        if not (args.curve_server_key and args.curve_client_key):
            ap.error("--curve-server-key and --curve-client-key go together")
        sock.curve_serverkey = read_key(args.curve_server_key)
        sock.curve_publickey = read_key(args.curve_client_key + ".public")
        sock.curve_secretkey = read_key(args.curve_client_key + ".secret")
    sock.connect(args.endpoint)

    live = {}
    for i, prompt in enumerate(args.prompts):
        rid = "py-%d" % i
        live[rid] = {"streamed": "", "text": None, "finish_reason": None, "usage": None, "error": None}
        sock.send_string(json.dumps({
            "v": 1, "type": "submit", "id": rid, "prompt": prompt, "stream": not args.no_stream,
            "params": {"max_tokens": args.max_tokens, "temperature": args.temperature}}))

    pending = set(live)
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    while pending:
        if not poller.poll(args.timeout * 1000):
            print("no message from %s for %.0f s" % (args.endpoint, args.timeout), file=sys.stderr)
            return 2
        msg = json.loads(sock.recv())
        kind, rid = msg.get("type"), msg.get("id")
        if kind == "keepalive" or rid not in live:
            continue
        r = live[rid]
        if kind == "token":
            r["streamed"] += msg["text"]
            if not args.json and len(args.prompts) == 1:
                print(msg["text"], end="", flush=True)
        elif kind == "final":
            r["text"], r["finish_reason"], r["usage"] = msg["text"], msg["finish_reason"], msg["usage"]
            r["token_ids"] = msg["token_ids"]
            if msg["done"]:
                pending.discard(rid)
        elif kind == "error":
            r["error"] = {"code": msg["code"], "message": msg["message"]}
            pending.discard(rid)

    sock.send_string(json.dumps({"v": 1, "type": "bye"}))
    if args.json:
        print(json.dumps(live))
    elif len(args.prompts) == 1:
        r = live["py-0"]
        print() if r["error"] is None else print("error: %s" % r["error"], file=sys.stderr)
        if args.no_stream and r["text"] is not None:
            print(r["text"])
    else:
        for rid, r in live.items():
            print("%s: %s" % (rid, r["text"] if r["error"] is None else r["error"]))
    return 1 if any(r["error"] for r in live.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
