#!/usr/bin/env python3
"""float64 references for `llmk eval` (tests/apps/test_eval.cpp).

  perplexity MODEL_DIR IN_JSON OUT_JSON
      IN_JSON: {"tokens": [...], "ctx": C, "chunks": N, "bos_id": B}, the
      whole text's ids. Cuts them as llama.cpp's llama-perplexity does: full
      chunks of C ids (at most N), each chunk's first id replaced by B when
      B >= 0, each chunk run from an empty context through
      arch_reference.forward (float64) on the Hugging Face checkpoint in
      MODEL_DIR, and the logits at positions C//2 .. C-2 scored against the
      next id. Writes {"perplexity", "mean_nll", "count"}.

  kl BASE_FILE OTHER_FILE OUT_JSON
      Two files written by `llmk eval --save-logits` over the same tokens:
      KL(base || other) per scored row from their stored log-probabilities,
      (both rows renormalized after their f16 rounding), its mean, median and
      max, the top-1 agreement of their stored argmaxes, a bound on what the
      other run's f16 rounding changes, and both perplexities from the stored
      NLLs.
"""
import json
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import arch_reference  # noqa: E402


def read_safetensors(path):
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        begin, end = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=np.float32).reshape(t["shape"])
    return out


def perplexity(model_dir, in_json, out_json):
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    shape = dict(hidden=cfg["hidden_size"], heads=cfg["num_attention_heads"], kv_heads=cfg["num_key_value_heads"],
                 layers=cfg["num_hidden_layers"], eps=cfg["rms_norm_eps"])
    spec = dict(theta=cfg.get("rope_theta", 10000.0), tied=cfg.get("tie_word_embeddings", False), bias=False,
                window=None, scaling=None)
    w = read_safetensors(Path(model_dir) / "model.safetensors")
    job = json.loads(Path(in_json).read_text())
    tokens, ctx, bos = job["tokens"], job["ctx"], job["bos_id"]
    chunks = min(job["chunks"], len(tokens) // ctx) if job["chunks"] > 0 else len(tokens) // ctx
    nlls = []
    for c in range(chunks):
        ids = list(tokens[c * ctx:(c + 1) * ctx])
        targets = list(ids)
        if bos >= 0:
            ids[0] = bos
        logits = arch_reference.forward(w, spec, ids, shape)
        for j in range(ctx // 2, ctx - 1):
            row = logits[j]
            m = row.max()
            nlls.append(m + np.log(np.exp(row - m).sum()) - row[targets[j + 1]])
    mean = float(np.mean(nlls))
    Path(out_json).write_text(json.dumps({"perplexity": float(np.exp(mean)), "mean_nll": mean, "count": len(nlls)}))


def read_logits(path):
    data = Path(path).read_bytes()
    assert data[:8] == b"LLMKLOGP", path
    version, n = struct.unpack("<II", data[8:16])
    assert version == 1
    header = json.loads(data[16:16 + n])
    pos = 16 + n + 4 * header["num_tokens"]
    vocab = header["vocab_size"]
    rows = header["num_chunks"] * (header["ctx"] - 1 - header["first_scored"])
    rec = np.dtype([("argmax", "<i4"), ("nll", "<f4"), ("log_probs", "<f2", (vocab,))])
    table = np.frombuffer(data[pos:], dtype=rec)
    assert len(table) == rows, (len(table), rows)
    return header, table


def renormalize(log_probs):
    m = log_probs.max(axis=1, keepdims=True)
    return log_probs - (m + np.log(np.exp(log_probs - m).sum(axis=1, keepdims=True)))


def kl(base_file, other_file, out_json):
    _, a = read_logits(base_file)
    _, b = read_logits(other_file)
    la = renormalize(a["log_probs"].astype(np.float64))
    lb = renormalize(b["log_probs"].astype(np.float64))
    pa, pb = np.exp(la), np.exp(lb)
    kls = (pa * (la - lb)).sum(axis=1)
    # llmk compares the base's stored row with the other's exact one; the
    # other's f16 rounding (|x| * 2^-11 per log-probability) moves each row's
    # KL by at most 2^-11 * sum |pa - pb| * |lb| (to first order).
    bound = 2.0 ** -11 * (np.abs(pa - pb) * np.abs(lb)).sum(axis=1)
    ppl = lambda t: float(np.exp(t["nll"].astype(np.float64).mean()))  # noqa: E731
    Path(out_json).write_text(json.dumps({
        "kl_mean": float(kls.mean()), "kl_median": float(np.median(kls)), "kl_max": float(kls.max()),
        "top1_agreement": float((a["argmax"] == b["argmax"]).mean()),
        "rounding_bound_mean": float(bound.mean()), "rounding_bound_max": float(bound.max()),
        "base_perplexity": ppl(a), "perplexity": ppl(b), "count": int(len(kls))}))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "perplexity":
        perplexity(*sys.argv[2:])
    elif len(sys.argv) == 5 and sys.argv[1] == "kl":
        kl(*sys.argv[2:])
    else:
        sys.exit(f"usage: {sys.argv[0]} perplexity MODEL_DIR IN_JSON OUT_JSON | kl BASE_FILE OTHER_FILE OUT_JSON")
