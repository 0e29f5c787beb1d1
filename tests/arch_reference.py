#!/usr/bin/env python3
"""Tiny random checkpoints of the architectures llmk runs beyond Llama 2, and
their float64 NumPy reference.

  write ARCH OUT_DIR    ARCH: llama3 | linear | qwen2 | mistral
                        (see ARCHS). Writes
    OUT_DIR/hf/config.json + model.safetensors   (Hugging Face layout, F32)
    OUT_DIR/model.gguf                           (PyPI gguf: llama.cpp's writer)
    OUT_DIR/reference.json                       prompt ids, float64 logits of
                                                 prompt + greedy continuation at
                                                 every position, greedy ids, and
                                                 the logits without the
                                                 architecture's feature

The reference is written from the model's definition, not from llmk: RMSNorm,
q/k/v projections (+ biases for Qwen2), rotate-half RoPE with the inverse
frequencies of transformers' rope_scaling ("linear": divided by factor;
"llama3": per-frequency blend between the original and the divided
frequency by wavelength), grouped-query attention with a causal mask (and a
sliding window: a query at p sees (p - window, p]), SwiGLU MLP, final norm,
lm_head (the embedding when tied). Greedy decoding re-runs the whole
sequence each step.

The GGUF twin stores the same weights as llama.cpp's converter would: llama
Q/K rows permuted per head (qwen2 unpermuted), llama3 scaling as the
rope_freqs tensor of per-frequency divisors, linear scaling as
rope.scaling.type/factor, the window as attention.sliding_window.
"""
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
import gguf

# hidden 64, 2 layers, 4 heads of 16 over 2 KV heads, vocab 384.
BASE = dict(hidden=64, inter=96, layers=2, heads=4, kv_heads=2, vocab=384, eps=1e-5)
ARCHS = {
    # Original context 64: wavelengths 6.3 (kept), 20 and 63 (blended), the rest divided.
    "llama3": dict(arch="LlamaForCausalLM", theta=10000.0, tied=False, bias=False, window=None,
                   scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 64}),
    "linear": dict(arch="LlamaForCausalLM", theta=10000.0, tied=False, bias=False, window=None,
                   scaling={"type": "linear", "factor": 4.0}),
    "qwen2": dict(arch="Qwen2ForCausalLM", theta=1000000.0, tied=True, bias=True, window=None, scaling=None),
    "mistral": dict(arch="MistralForCausalLM", theta=10000.0, tied=False, bias=False, window=8, scaling=None),
}
PROMPT_LEN, NUM_GENERATED, CONTEXT = 14, 12, 128


def make_weights(spec, seed):
    rng = np.random.default_rng(seed)
    h, inter, hd = BASE["hidden"], BASE["inter"], BASE["hidden"] // BASE["heads"]
    q, kv = BASE["heads"] * hd, BASE["kv_heads"] * hd

    def mat(rows, cols, scale=1.0):
        return (rng.standard_normal((rows, cols)) * scale / math.sqrt(cols)).astype(np.float32)

    # A tied head reads the embedding: kept small beside the layers' outputs,
    # or each token's own row would dominate its logits.
    embed_std = 0.1 if spec["tied"] else 1.0
    w = {"model.embed_tokens.weight": (embed_std * rng.standard_normal((BASE["vocab"], h))).astype(np.float32)}
    for i in range(BASE["layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = (1 + 0.2 * rng.standard_normal(h)).astype(np.float32)
        w[p + "self_attn.q_proj.weight"] = mat(q, h, 2.0)
        w[p + "self_attn.k_proj.weight"] = mat(kv, h, 2.0)
        w[p + "self_attn.v_proj.weight"] = mat(kv, h)
        if spec["bias"]:
            w[p + "self_attn.q_proj.bias"] = (0.5 * rng.standard_normal(q)).astype(np.float32)
            w[p + "self_attn.k_proj.bias"] = (0.5 * rng.standard_normal(kv)).astype(np.float32)
            w[p + "self_attn.v_proj.bias"] = (0.5 * rng.standard_normal(kv)).astype(np.float32)
        w[p + "self_attn.o_proj.weight"] = mat(h, q)
        w[p + "post_attention_layernorm.weight"] = (1 + 0.2 * rng.standard_normal(h)).astype(np.float32)
        w[p + "mlp.gate_proj.weight"] = mat(inter, h)
        w[p + "mlp.up_proj.weight"] = mat(inter, h)
        w[p + "mlp.down_proj.weight"] = mat(h, inter)
    w["model.norm.weight"] = (1 + 0.2 * rng.standard_normal(h)).astype(np.float32)
    if not spec["tied"]:
        w["lm_head.weight"] = mat(BASE["vocab"], h, 4.0)
    return w


def inv_freq(spec, shape=BASE):
    """transformers' rope_init_fn for the config's rope_scaling, in float64."""
    hd = shape["hidden"] // shape["heads"]
    inv = spec["theta"] ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    s = spec["scaling"]
    if s is None:
        return inv
    kind = s.get("rope_type", s.get("type"))
    if kind == "linear":
        return inv / s["factor"]
    assert kind == "llama3"
    factor, low, high, old = s["factor"], s["low_freq_factor"], s["high_freq_factor"], s["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return np.where(medium, blended, scaled)


def rms_norm(x, w, eps=BASE["eps"]):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, positions, inv):
    """x: [T, heads, hd]; rotate-half pairs (i, i + hd/2)."""
    angles = positions[:, None].astype(np.float64) * inv[None, :]  # [T, hd/2]
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def forward(w, spec, ids, shape=BASE):
    """float64 logits [T, vocab] of the whole sequence; `shape` as BASE (another model's sizes)."""
    W = {k: v.astype(np.float64) for k, v in w.items()}
    T, hd = len(ids), shape["hidden"] // shape["heads"]
    nh, nkv = shape["heads"], shape["kv_heads"]
    inv = inv_freq(spec, shape)
    pos = np.arange(T)
    # mask[i, j]: query i sees key j
    mask = pos[None, :] <= pos[:, None]
    if spec["window"]:
        mask &= pos[None, :] > pos[:, None] - spec["window"]
    x = W["model.embed_tokens.weight"][ids]
    for i in range(shape["layers"]):
        p = f"model.layers.{i}."
        hn = rms_norm(x, W[p + "input_layernorm.weight"], shape["eps"])
        q, k, v = (hn @ W[p + f"self_attn.{n}_proj.weight"].T for n in "qkv")
        if spec["bias"]:
            q, k, v = (t + W[p + f"self_attn.{n}_proj.bias"] for t, n in zip((q, k, v), "qkv"))
        q = rope(q.reshape(T, nh, hd), pos, inv)
        k = rope(k.reshape(T, nkv, hd), pos, inv)
        v = v.reshape(T, nkv, hd)
        out = np.empty((T, nh, hd))
        for head in range(nh):
            g = head // (nh // nkv)
            scores = q[:, head, :] @ k[:, g, :].T / math.sqrt(hd)
            scores = np.where(mask, scores, -np.inf)
            scores = np.exp(scores - scores.max(axis=1, keepdims=True))
            out[:, head, :] = (scores / scores.sum(axis=1, keepdims=True)) @ v[:, g, :]
        x = x + out.reshape(T, nh * hd) @ W[p + "self_attn.o_proj.weight"].T
        hn = rms_norm(x, W[p + "post_attention_layernorm.weight"], shape["eps"])
        gate, up = hn @ W[p + "mlp.gate_proj.weight"].T, hn @ W[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ W[p + "mlp.down_proj.weight"].T
    head_w = W["model.embed_tokens.weight"] if spec["tied"] else W["lm_head.weight"]
    return rms_norm(x, W["model.norm.weight"], shape["eps"]) @ head_w.T


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        data = np.ascontiguousarray(t, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_hf(out, spec, w):
    out.mkdir(parents=True, exist_ok=True)
    cfg = {
        "architectures": [spec["arch"]],
        "model_type": {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2"}[
            spec["arch"]],
        "hidden_size": BASE["hidden"], "intermediate_size": BASE["inter"], "num_hidden_layers": BASE["layers"],
        "num_attention_heads": BASE["heads"], "num_key_value_heads": BASE["kv_heads"], "vocab_size": BASE["vocab"],
        "max_position_embeddings": CONTEXT, "rms_norm_eps": BASE["eps"], "rope_theta": spec["theta"],
        "hidden_act": "silu", "tie_word_embeddings": spec["tied"], "torch_dtype": "float32",
        "bos_token_id": 1, "eos_token_id": 2, "rope_scaling": spec["scaling"],
    }
    if spec["arch"] == "MistralForCausalLM":
        cfg["sliding_window"] = spec["window"]
    if spec["arch"] == "Qwen2ForCausalLM":  # as Qwen2.5 ships it: a window key that is not used
        cfg.update({"use_sliding_window": False, "sliding_window": CONTEXT, "max_window_layers": BASE["layers"]})
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    write_safetensors(out / "model.safetensors", w)


def permute(m, n_head):
    """llama.cpp's converter: each head's rows (i, i + d/2) become (2i, 2i+1)."""
    return m.reshape(n_head, 2, m.shape[0] // n_head // 2, *m.shape[1:]).swapaxes(1, 2).reshape(m.shape)


def llama3_rope_factors(s, hd, theta):
    """Per-frequency divisors as llama.cpp's converter computes them for
    rope_type llama3: 1 for short wavelengths, factor for long ones, the
    reciprocal of the blend in between."""
    factors = []
    for f in theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd):
        wavelen = 2 * math.pi / f
        old, low, high, factor = (s["original_max_position_embeddings"], s["low_freq_factor"], s["high_freq_factor"],
                                  s["factor"])
        if wavelen < old / high:
            factors.append(1.0)
        elif wavelen > old / low:
            factors.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            factors.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def write_gguf(path, spec, w):
    arch = "qwen2" if spec["arch"] == "Qwen2ForCausalLM" else "llama"
    hd = BASE["hidden"] // BASE["heads"]
    g = gguf.GGUFWriter(path, arch)
    g.add_context_length(CONTEXT)
    g.add_embedding_length(BASE["hidden"])
    g.add_block_count(BASE["layers"])
    g.add_feed_forward_length(BASE["inter"])
    g.add_rope_dimension_count(hd)
    g.add_head_count(BASE["heads"])
    g.add_head_count_kv(BASE["kv_heads"])
    g.add_layer_norm_rms_eps(BASE["eps"])
    g.add_rope_freq_base(spec["theta"])
    g.add_vocab_size(BASE["vocab"])
    s = spec["scaling"]
    if s is not None and s.get("type") == "linear":
        g.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        g.add_rope_scaling_factor(s["factor"])
    if s is not None and s.get("rope_type") == "llama3":
        g.add_tensor("rope_freqs.weight", llama3_rope_factors(s, hd, spec["theta"]))
    if spec["window"]:
        g.add_sliding_window(spec["window"])
    g.add_tensor("token_embd.weight", w["model.embed_tokens.weight"])
    for i in range(BASE["layers"]):
        p = f"model.layers.{i}."
        qk = (lambda m, n: permute(m, n)) if arch == "llama" else (lambda m, n: m)
        g.add_tensor(f"blk.{i}.attn_norm.weight", w[p + "input_layernorm.weight"])
        g.add_tensor(f"blk.{i}.attn_q.weight", qk(w[p + "self_attn.q_proj.weight"], BASE["heads"]))
        g.add_tensor(f"blk.{i}.attn_k.weight", qk(w[p + "self_attn.k_proj.weight"], BASE["kv_heads"]))
        g.add_tensor(f"blk.{i}.attn_v.weight", w[p + "self_attn.v_proj.weight"])
        if spec["bias"]:
            for n in "qkv":
                g.add_tensor(f"blk.{i}.attn_{n}.bias", w[p + f"self_attn.{n}_proj.bias"])
        g.add_tensor(f"blk.{i}.attn_output.weight", w[p + "self_attn.o_proj.weight"])
        g.add_tensor(f"blk.{i}.ffn_norm.weight", w[p + "post_attention_layernorm.weight"])
        g.add_tensor(f"blk.{i}.ffn_gate.weight", w[p + "mlp.gate_proj.weight"])
        g.add_tensor(f"blk.{i}.ffn_up.weight", w[p + "mlp.up_proj.weight"])
        g.add_tensor(f"blk.{i}.ffn_down.weight", w[p + "mlp.down_proj.weight"])
    g.add_tensor("output_norm.weight", w["model.norm.weight"])
    if not spec["tied"]:
        g.add_tensor("output.weight", w["lm_head.weight"])
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


def write(arch, out):
    spec, out = ARCHS[arch], Path(out)
    w = make_weights(spec, seed=sorted(ARCHS).index(arch) + 7)
    write_hf(out / "hf", spec, w)
    write_gguf(out / "model.gguf", spec, w)
    rng = np.random.default_rng(99)
    ids = [int(t) for t in rng.integers(3, BASE["vocab"], PROMPT_LEN)]
    margins = []
    for _ in range(NUM_GENERATED):
        last = forward(w, spec, ids)[-1]
        top2 = np.sort(last)[-2:]
        margins.append(float(top2[1] - top2[0]))
        ids.append(int(np.argmax(last)))
    logits = forward(w, spec, ids)
    # The same sequence with the architecture's own feature left out (no
    # window, no biases, no rope scaling): what a forward that ignored it
    # would give, for tests to show they tell the two apart.
    ablated = dict(spec, window=None, bias=False, scaling=None)
    ablated_logits = forward({k: v for k, v in w.items() if not k.endswith(".bias")}, ablated, ids)
    ref = {"prompt_ids": ids[:PROMPT_LEN], "greedy_ids": ids[PROMPT_LEN:], "vocab_size": BASE["vocab"],
           "logits": logits.tolist(), "ablated_logits": ablated_logits.tolist(), "min_greedy_margin": min(margins),
           "window": spec["window"]}
    (out / "reference.json").write_text(json.dumps(ref))


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "write" or sys.argv[2] not in ARCHS:
        sys.exit(f"usage: {sys.argv[0]} write {'|'.join(ARCHS)} OUT_DIR")
    write(sys.argv[2], sys.argv[3])
