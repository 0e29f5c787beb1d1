#!/usr/bin/env python3
"""float64 NumPy reference for embeddings of a Hugging Face Llama checkpoint.

  embed MODEL_DIR   stdin: {"inputs": [[ids...], ...]}; stdout: per input the
                    float64 mean and last pooling of the final-RMSNorm hidden
                    states, raw, unit length, and truncated to DIMS = 16 then
                    unit length
  decode            stdin: base64 strings, one a line; stdout: the float32
                    values as the openai SDK decodes them (little-endian f32)

The forward is tests/arch_reference.py's (Hugging Face Llama semantics) with
an identity lm_head, so its "logits" are the final-normed hidden states. The
safetensors file is read with NumPy alone.
"""
import base64
import json
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import arch_reference  # noqa: E402

DIMS = 16


def read_safetensors(path):
    raw = Path(path).read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + header_len])
    body = raw[8 + header_len:]
    kinds = {"F32": "<f4", "F16": "<f2"}
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        begin, end = meta["data_offsets"]
        out[name] = np.frombuffer(body[begin:end], dtype=kinds[meta["dtype"]]).reshape(meta["shape"])
    return out


def unit(v):
    return v / np.linalg.norm(v)


def embed(model_dir):
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    w = read_safetensors(Path(model_dir) / "model.safetensors")
    h = cfg["hidden_size"]
    w["lm_head.weight"] = np.eye(h, dtype=np.float32)
    shape = dict(hidden=h, layers=cfg["num_hidden_layers"], heads=cfg["num_attention_heads"],
                 kv_heads=cfg.get("num_key_value_heads", cfg["num_attention_heads"]), eps=cfg["rms_norm_eps"])
    spec = dict(theta=cfg.get("rope_theta", 10000.0), tied=False, bias=False, window=None, scaling=None)
    out = []
    for ids in json.load(sys.stdin)["inputs"]:
        hidden = arch_reference.forward(w, spec, np.array(ids), shape)  # [T, hidden], float64
        pooled = {"mean": hidden.mean(axis=0), "last": hidden[-1]}
        entry = {}
        for name, v in pooled.items():
            entry[name] = v.tolist()
            entry[name + "_unit"] = unit(v).tolist()
            entry[name + "_unit_dims"] = unit(v[:DIMS]).tolist()
        out.append(entry)
    json.dump({"dims": DIMS, "embeddings": out}, sys.stdout)


def decode():
    rows = [np.frombuffer(base64.b64decode(line.strip()), dtype="<f4").tolist() for line in sys.stdin if line.strip()]
    json.dump(rows, sys.stdout)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "embed":
        embed(sys.argv[2])
    elif len(sys.argv) == 2 and sys.argv[1] == "decode":
        decode()
    else:
        sys.exit(f"usage: {sys.argv[0]} embed MODEL_DIR | decode")
