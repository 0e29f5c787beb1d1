#!/usr/bin/env python3
"""float64 references for `llmk eval` (tests/apps/test_eval.cpp).

  perplexity MODEL IN_JSON OUT_JSON
      IN_JSON: {"tokens": [...], "ctx": C, "chunks": N, "bos_id": B}, the
      whole text's ids. Cuts them as llama.cpp's llama-perplexity does: full
      chunks of C ids (at most N), each chunk's first id replaced by B when
      B >= 0, each chunk run from an empty context through
      arch_reference.forward (float64) on MODEL: a Hugging Face directory or
      a llama GGUF (dequantized by PyPI gguf, Q/K rows put back in Hugging
      Face's order), and the logits at positions C//2 .. C-2 scored against the
      next id. Writes {"perplexity", "mean_nll", "count"}.

  kl BASE_FILE OTHER_FILE OUT_JSON
      Two files written by `llmk eval --save-logits` over the same tokens:
      KL(base || other) per scored row from their stored log-probabilities,
      (both rows renormalized after their f16 rounding), its mean, median and
      max, the top-1 agreement of their stored argmaxes, a bound on what the
      other run's f16 rounding changes, and both perplexities from the stored
      NLLs.

  f32-gguf IN OUT
      A copy of the llama GGUF IN with every tensor dequantized to F32 by
      PyPI gguf and tokenizer.ggml.pre 'gpt2' (SmolLM2's 'smollm' is gpt2's
      pre-tokenizer that also splits digits one by one).

  stream MODEL IN_JSON OUT_JSON
      IN_JSON: {"tokens": [...], "window": W, "sinks": S, "batch": B}. The
      StreamingLLM paper's cache, computed its own way: the ids run through
      arch_reference's layers B at a time; before a step whose ids would pass
      W cached rows, the oldest rows after the first S leave; every query and
      every cached key is rotated by its position *within the cache*, keys
      kept unrotated and rotated afresh each step (W 0: nothing leaves).
      Every position but the last is scored. Writes {"perplexity",
      "mean_nll", "count", "peak_rows"}.
"""
import json
import math
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


def load_hf(model_dir):
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    shape = dict(hidden=cfg["hidden_size"], heads=cfg["num_attention_heads"], kv_heads=cfg["num_key_value_heads"],
                 layers=cfg["num_hidden_layers"], eps=cfg["rms_norm_eps"])
    spec = dict(theta=cfg.get("rope_theta", 10000.0), tied=cfg.get("tie_word_embeddings", False), bias=False,
                window=None, scaling=None)
    return read_safetensors(Path(model_dir) / "model.safetensors"), shape, spec


# llama.cpp's converter names, per layer, against Hugging Face's.
GGUF_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
              "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
              "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}


def unpermute(m, n_head):
    """Undoes the converter's per-head reordering of llama Q/K rows (rotary pairs interleaved)."""
    return m.reshape(n_head, m.shape[0] // n_head // 2, 2, *m.shape[1:]).swapaxes(1, 2).reshape(m.shape)


def load_gguf(path):
    """A llama GGUF's weights, dequantized to float32 and renamed to Hugging Face's layout."""
    import gguf
    r = gguf.GGUFReader(path)
    meta = lambda k: r.fields[k].contents()  # noqa: E731
    shape = dict(hidden=meta("llama.embedding_length"), heads=meta("llama.attention.head_count"),
                 kv_heads=meta("llama.attention.head_count_kv"), layers=meta("llama.block_count"),
                 eps=meta("llama.attention.layer_norm_rms_epsilon"))
    w = {}
    for t in r.tensors:
        a = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        if t.name.startswith("blk."):
            _, layer, kind, _ = t.name.split(".")
            if kind == "attn_q":
                a = unpermute(a, shape["heads"])
            elif kind == "attn_k":
                a = unpermute(a, shape["kv_heads"])
            w[f"model.layers.{layer}.{GGUF_NAMES[kind]}.weight"] = a
        else:
            w[{"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
               "output.weight": "lm_head.weight"}[t.name]] = a
    spec = dict(theta=float(meta("llama.rope.freq_base")), tied="lm_head.weight" not in w, bias=False, window=None,
                scaling=None)
    return w, shape, spec


def write_f32_gguf(src, dst):
    """A copy of a llama GGUF with every tensor dequantized to F32 and tokenizer.ggml.pre set to gpt2 (SmolLM2's
    'smollm' splits digits one by one besides; a text without digits tokenizes the same under both)."""
    import gguf
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, arch=r.fields["general.architecture"].contents())
    for f in r.fields.values():
        if f.name == "general.architecture" or f.name.startswith("GGUF."):
            continue
        value = {"tokenizer.ggml.pre": "gpt2", "general.file_type": 0}.get(f.name, f.contents())
        w.add_key_value(f.name, value, f.types[0], sub_type=f.types[-1] if len(f.types) > 1 else None)
    for t in r.tensors:
        w.add_tensor(t.name, np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def perplexity(model, in_json, out_json):
    w, shape, spec = load_gguf(model) if model.endswith(".gguf") else load_hf(model)
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


def stream(model, in_json, out_json):
    w, shape, spec = load_gguf(model) if model.endswith(".gguf") else load_hf(model)
    W64 = {k: v.astype(np.float64) for k, v in w.items()}
    job = json.loads(Path(in_json).read_text())
    tokens, batch = job["tokens"], job["batch"]
    window = job["window"] or len(tokens)
    sinks = job["sinks"] if job["window"] else 0
    nh, nkv = shape["heads"], shape["kv_heads"]
    hd = shape["hidden"] // nh
    inv = arch_reference.inv_freq(spec, shape)
    keys = [np.zeros((0, nkv, hd)) for _ in range(shape["layers"])]  # unrotated, cache order
    values = [np.zeros((0, nkv, hd)) for _ in range(shape["layers"])]
    nlls, peak = [], 0
    for begin in range(0, len(tokens), batch):
        ids = tokens[begin:begin + batch]
        n, length = len(ids), keys[0].shape[0]
        if length + n > window:  # the oldest rows after the sinks leave
            drop = length + n - window
            keys = [np.concatenate([k[:sinks], k[sinks + drop:]]) for k in keys]
            values = [np.concatenate([v[:sinks], v[sinks + drop:]]) for v in values]
            length -= drop
        peak = max(peak, length + n)
        cache_pos = np.arange(length + n)
        x = W64["model.embed_tokens.weight"][ids]
        for i in range(shape["layers"]):
            p = f"model.layers.{i}."
            hn = arch_reference.rms_norm(x, W64[p + "input_layernorm.weight"], shape["eps"])
            q, k, v = (hn @ W64[p + f"self_attn.{m}_proj.weight"].T for m in "qkv")
            if spec["bias"]:
                q, k, v = (t + W64[p + f"self_attn.{m}_proj.bias"] for t, m in zip((q, k, v), "qkv"))
            keys[i] = np.concatenate([keys[i], k.reshape(n, nkv, hd)])
            values[i] = np.concatenate([values[i], v.reshape(n, nkv, hd)])
            q = arch_reference.rope(q.reshape(n, nh, hd), cache_pos[length:], inv)
            k_rot = arch_reference.rope(keys[i], cache_pos, inv)
            mask = cache_pos[None, :] <= cache_pos[length:, None]
            out = np.empty((n, nh, hd))
            for head in range(nh):
                g = head // (nh // nkv)
                scores = np.where(mask, q[:, head, :] @ k_rot[:, g, :].T / math.sqrt(hd), -np.inf)
                scores = np.exp(scores - scores.max(axis=1, keepdims=True))
                out[:, head, :] = (scores / scores.sum(axis=1, keepdims=True)) @ values[i][:, g, :]
            x = x + out.reshape(n, nh * hd) @ W64[p + "self_attn.o_proj.weight"].T
            hn = arch_reference.rms_norm(x, W64[p + "post_attention_layernorm.weight"], shape["eps"])
            gate, up = hn @ W64[p + "mlp.gate_proj.weight"].T, hn @ W64[p + "mlp.up_proj.weight"].T
            x = x + (gate / (1 + np.exp(-gate)) * up) @ W64[p + "mlp.down_proj.weight"].T
        head_w = W64["model.embed_tokens.weight"] if spec["tied"] else W64["lm_head.weight"]
        logits = arch_reference.rms_norm(x, W64["model.norm.weight"], shape["eps"]) @ head_w.T
        for j in range(n):
            if begin + j + 1 < len(tokens):
                row = logits[j]
                m = row.max()
                nlls.append(m + np.log(np.exp(row - m).sum()) - row[tokens[begin + j + 1]])
    mean = float(np.mean(nlls))
    Path(out_json).write_text(json.dumps({"perplexity": float(np.exp(mean)), "mean_nll": mean, "count": len(nlls),
                                          "peak_rows": peak}))


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
    elif len(sys.argv) == 5 and sys.argv[1] == "stream":
        stream(*sys.argv[2:])
    elif len(sys.argv) == 5 and sys.argv[1] == "kl":
        kl(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "f32-gguf":
        write_f32_gguf(*sys.argv[2:])
    else:
        sys.exit(f"usage: {sys.argv[0]} perplexity MODEL IN_JSON OUT_JSON | stream MODEL IN_JSON OUT_JSON | kl BASE OTHER OUT_JSON | f32-gguf IN OUT")
