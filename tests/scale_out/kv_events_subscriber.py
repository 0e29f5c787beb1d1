"""A KV-event subscriber as a KV-aware router runs one, written from the wire
format alone (pyzmq + msgpack): it subscribes to the PUB socket, fills the
gaps it missed (those before it joined, and any other) from the replay
socket, and rebuilds the set of cached blocks by replaying the batches in
sequence order.

It prints "ready" once subscribed. When the file named by --expect appears
(JSON: {"last_seq": N, "hashes": [...]}), it completes batches 0..N, checks
every batch's shape, compares the rebuilt set with "hashes", prints a JSON
summary and exits 0 when they are equal, 1 otherwise. With --replay-only it
takes every batch the replay socket keeps, checks and replays them, and
prints the summary (with the first event's tag and the block sizes seen).
"""
import argparse
import json
import os
import sys
import time

import msgpack
import zmq


def fail(message):
    print(json.dumps({"ok": False, "error": message}), flush=True)
    sys.exit(1)


def apply_batch(seq, payload, blocks, counts):
    batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    if not (isinstance(batch, list) and len(batch) >= 2 and isinstance(batch[0], float) and isinstance(batch[1], list)):
        fail(f"batch {seq} is not [timestamp, events]: {batch!r}")
    for event in batch[1]:
        if not (isinstance(event, list) and event and isinstance(event[0], str)):
            fail(f"batch {seq}: an event is not a tagged array: {event!r}")
        tag = event[0]
        if tag == "BlockStored":
            if len(event) < 6:
                fail(f"batch {seq}: BlockStored with {len(event) - 1} fields: {event!r}")
            hashes, parent, tokens, block_size = event[1], event[2], event[3], event[4]
            if len(tokens) != len(hashes) * block_size:
                fail(f"batch {seq}: {len(hashes)} blocks of {block_size} but {len(tokens)} tokens")
            for i, h in enumerate(hashes):
                if h in blocks:
                    fail(f"batch {seq}: block {h} stored while held")
                blocks[h] = (parent if i == 0 else hashes[i - 1], tokens[i * block_size:(i + 1) * block_size])
            counts["stored"] += len(hashes)
        elif tag == "BlockRemoved":
            for h in event[1]:
                if blocks.pop(h, None) is None:
                    fail(f"batch {seq}: block {h} removed while not held")
            counts["removed"] += len(event[1])
        elif tag == "AllBlocksCleared":
            blocks.clear()
            counts["cleared"] += 1
        else:
            fail(f"batch {seq}: unknown event {tag!r}")


def replay(ctx, endpoint, start, batches):
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    sock.send_multipart([b"", start.to_bytes(8, "big")])
    while True:
        if not sock.poll(10000):
            fail(f"no answer from the replay socket {endpoint}")
        frames = sock.recv_multipart()
        if len(frames) != 3 or frames[0] != b"":
            fail(f"replay answer of {len(frames)} frames")
        seq = int.from_bytes(frames[1], "big", signed=True)
        if seq == -1:
            break
        batches.setdefault(seq, frames[2])
    sock.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--endpoint", required=True, help="the PUB endpoint to connect to")
    ap.add_argument("--replay", required=True, help="the replay ROUTER endpoint")
    ap.add_argument("--topic", default="")
    ap.add_argument("--expect", help="JSON file the publisher side writes when done")
    ap.add_argument("--replay-only", action="store_true", help="rebuild from the replay socket alone")
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args()

    ctx = zmq.Context()
    if args.replay_only:
        batches = {}
        replay(ctx, args.replay, 0, batches)
        if sorted(batches) != list(range(len(batches))):
            fail(f"replayed sequence numbers are not 0..{len(batches) - 1}")
        blocks, counts = {}, {"stored": 0, "removed": 0, "cleared": 0}
        for seq in range(len(batches)):
            apply_batch(seq, batches[seq], blocks, counts)
        first = msgpack.unpackb(batches[0], raw=False)[1][0][0] if batches else None
        sizes = sorted({len(tokens) for _, tokens in blocks.values()})
        print(json.dumps({"ok": True, "batches": len(batches), "first_event": first, "blocks": len(blocks),
                          "block_sizes": sizes, **counts}), flush=True)
        return
    if not args.expect:
        fail("--expect is required (or --replay-only)")
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, args.topic.encode())
    sub.connect(args.endpoint)
    print("ready", flush=True)

    batches = {}
    live = 0
    expect = None
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if sub.poll(50):
            topic, seq_bytes, payload = sub.recv_multipart()
            if topic != args.topic.encode():
                fail(f"topic {topic!r}, expected {args.topic!r}")
            batches.setdefault(int.from_bytes(seq_bytes, "big"), payload)
            live += 1
            continue
        if expect is None and os.path.exists(args.expect):
            with open(args.expect) as f:
                expect = json.load(f)
        if expect is not None:
            break
    if expect is None:
        fail(f"{args.expect} did not appear within {args.timeout} s")
    last = expect["last_seq"]
    missing = [s for s in range(last + 1) if s not in batches]
    if missing:
        replay(ctx, args.replay, missing[0], batches)
    replayed = sum(1 for s in missing if s in batches)
    still_missing = [s for s in range(last + 1) if s not in batches]
    if still_missing:
        fail(f"batches {still_missing[:10]} missing after replay")

    blocks, counts = {}, {"stored": 0, "removed": 0, "cleared": 0}
    for seq in range(last + 1):
        apply_batch(seq, batches[seq], blocks, counts)
    want = set(expect["hashes"])
    have = set(blocks)
    summary = {"ok": have == want, "batches": last + 1, "live": live, "replayed": replayed, "blocks": len(have),
               **counts}
    if have != want:
        summary["only_rebuilt"] = sorted(have - want)[:10]
        summary["only_allocator"] = sorted(want - have)[:10]
    print(json.dumps(summary), flush=True)
    sys.exit(0 if have == want else 1)


if __name__ == "__main__":
    main()
