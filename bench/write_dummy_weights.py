#!/usr/bin/env python3
"""Writes llmk's llama-110m dummy weights to disk, as a Hugging Face
safetensors folder and as an F32 GGUF file holding the same values, so that
llmk and another engine (llama.cpp) can run on identical weights.

  write_dummy_weights.py OUT_DIR [--seed 0] [--tokenizer tokenizer.model]
                         [--config config.json] [--gguf-name NAME.gguf]

Writes OUT_DIR/hf/{config.json, model.safetensors, tokenizer.model} and
OUT_DIR/llama-110m-f32.gguf. The values are those of
`llmk --load-format dummy --preset llama-110m --set model.seed=SEED`
(core/dummy_checkpoint.cpp), recomputed here bit for bit (--config: another
Llama shape, as `--preset CONFIG.json` gives it; tests/core checks the two
against each other on a small one):

  key   = mix64(mix64(seed) ^ fnv1a(tensor name))
  h_i   = mix64(key + i * 0x9e3779b97f4a7c15)                 (mod 2^64)
  w_i   = (2 u - 1 + 2^-24) * bound,  u = (h_i >> 40) / 2^24  (float32)
  bound = std * sqrt(3): norms are 1, embeddings std 0.02, [out, in]
          projections std 1 / sqrt(in)

Every float32 step above is exact except the final product, which numpy
rounds as the C++ code does. The GGUF file is written as llama.cpp's
converter writes a Llama: Q and K rows permuted per head (llmk's GGUF reader
undoes it), the sentencepiece vocabulary of the tokenizer in
tokenizer.ggml.*, the tied embedding as token_embd only.
"""
import argparse
import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np

# llama-110m (core/model_config.cpp): hidden 768, 12 layers, 12 heads (and KV
# heads), intermediate 2048, vocabulary 32000, 1024 positions, tied.
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 768,
    "intermediate_size": 2048,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "num_key_value_heads": 12,
    "vocab_size": 32000,
    "max_position_embeddings": 1024,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float32",
}

MASK = np.uint64(0xFFFFFFFFFFFFFFFF)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def mix64(z):
    """splitmix64's finalizer on a uint64 array (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def mix64_int(z):
    z &= 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


def fnv1a(s):
    h = 0xCBF29CE484222325
    for c in s.encode():
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def tensor_shapes(cfg):
    """Name -> shape ([out, in] for projections), as core/checkpoint.cpp's
    expected_tensors lists them."""
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    head_dim = cfg.get("head_dim", h // cfg["num_attention_heads"])
    q, kv = cfg["num_attention_heads"] * head_dim, cfg["num_key_value_heads"] * head_dim
    t = {"model.embed_tokens.weight": (cfg["vocab_size"], h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = (h,)
        t[p + "self_attn.q_proj.weight"] = (q, h)
        t[p + "self_attn.k_proj.weight"] = (kv, h)
        t[p + "self_attn.v_proj.weight"] = (kv, h)
        t[p + "self_attn.o_proj.weight"] = (h, q)
        t[p + "post_attention_layernorm.weight"] = (h,)
        t[p + "mlp.gate_proj.weight"] = (inter, h)
        t[p + "mlp.up_proj.weight"] = (inter, h)
        t[p + "mlp.down_proj.weight"] = (h, inter)
    t["model.norm.weight"] = (h,)
    if not cfg["tie_word_embeddings"]:
        t["lm_head.weight"] = (cfg["vocab_size"], h)
    return t


def dummy_tensor(name, shape, seed):
    """The float32 values llmk's dummy checkpoint gives tensor `name`."""
    n = int(np.prod(shape))
    if len(shape) == 1:  # norm weights (no biases in a Llama)
        return np.ones(shape, dtype=np.float32)
    std = np.float32(0.02) if name == "model.embed_tokens.weight" else np.float32(1) / np.sqrt(np.float32(shape[1]))
    bound = np.float32(std * np.sqrt(np.float32(3)))
    key = np.uint64(mix64_int(mix64_int(seed) ^ fnv1a(name)))
    out = np.empty(n, dtype=np.float32)
    step = 1 << 22
    with np.errstate(over="ignore"):
        for begin in range(0, n, step):
            idx = np.arange(begin, min(n, begin + step), dtype=np.uint64)
            h = mix64(key + idx * GOLDEN)
            u = (h >> np.uint64(40)).astype(np.float32) * np.float32(1.0 / 16777216.0)
            x = np.float32(2) * u - np.float32(1) + np.float32(1.0 / 16777216.0)
            out[begin : begin + len(idx)] = x * bound
    return out.reshape(shape)


def write_safetensors(path, tensors):
    header, offset = {}, 0
    for name, a in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # keep the data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for a in tensors.values():
            f.write(np.ascontiguousarray(a).tobytes())


def permute(w, n_head):
    """llama.cpp's converter layout: each head's rows (i, i + d/2) become (2i, 2i+1)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path, cfg, tensors, tokenizer_model):
    import gguf  # llama.cpp's own writer (PyPI), in the project venv

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from gguf_write_models import sentencepiece_vocab

    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("llmk-dummy-llama-110m")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_rope_dimension_count(cfg.get("head_dim", cfg["hidden_size"] // n_head))
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    pieces, scores, types = sentencepiece_vocab(tokenizer_model)
    if len(pieces) != cfg["vocab_size"]:
        sys.exit(f"{tokenizer_model}: {len(pieces)} pieces, the model has {cfg['vocab_size']}")
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    w.add_tensor("token_embd.weight", tensors["model.embed_tokens.weight"])
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", tensors[p + "input_layernorm.weight"])
        w.add_tensor(f"blk.{i}.attn_q.weight", permute(tensors[p + "self_attn.q_proj.weight"], n_head))
        w.add_tensor(f"blk.{i}.attn_k.weight", permute(tensors[p + "self_attn.k_proj.weight"], n_kv))
        w.add_tensor(f"blk.{i}.attn_v.weight", tensors[p + "self_attn.v_proj.weight"])
        w.add_tensor(f"blk.{i}.attn_output.weight", tensors[p + "self_attn.o_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_norm.weight", tensors[p + "post_attention_layernorm.weight"])
        w.add_tensor(f"blk.{i}.ffn_gate.weight", tensors[p + "mlp.gate_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_up.weight", tensors[p + "mlp.up_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_down.weight", tensors[p + "mlp.down_proj.weight"])
    w.add_tensor("output_norm.weight", tensors["model.norm.weight"])
    if not cfg["tie_word_embeddings"]:
        w.add_tensor("output.weight", tensors["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    root = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--seed", type=int, default=0, help="model.seed of the dummy weights (default 0)")
    ap.add_argument("--config", type=Path, help="a Llama config.json (default: the llama-110m preset)")
    ap.add_argument("--gguf-name", default="llama-110m-f32.gguf", help="file name of the GGUF in OUT_DIR")
    ap.add_argument("--tokenizer", type=Path, default=root.parent / "shared/models/llama2-tokenizer/tokenizer.model",
                    help="sentencepiece tokenizer.model with one piece per vocabulary entry (the GGUF needs a vocabulary)")
    args = ap.parse_args()
    if not args.tokenizer.is_file():
        sys.exit(f"no tokenizer at {args.tokenizer} (pass --tokenizer)")

    cfg = dict(CONFIG)
    if args.config:
        cfg = json.loads(args.config.read_text())
        cfg.setdefault("num_key_value_heads", cfg["num_attention_heads"])
        cfg.setdefault("rope_theta", 10000.0)
        cfg.setdefault("tie_word_embeddings", False)
        cfg.setdefault("bos_token_id", 1)
        cfg.setdefault("eos_token_id", 2)
        if cfg.get("attention_bias") or cfg.get("model_type", "llama") != "llama":
            sys.exit(f"{args.config}: only plain Llama shapes are written (no biases)")
    tensors = {name: dummy_tensor(name, shape, args.seed) for name, shape in tensor_shapes(cfg).items()}
    hf = args.out_dir / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    (hf / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    write_safetensors(hf / "model.safetensors", tensors)
    shutil.copyfile(args.tokenizer, hf / "tokenizer.model")
    write_gguf(args.out_dir / args.gguf_name, cfg, tensors, args.tokenizer)
    print(f"wrote {hf} and {args.out_dir / args.gguf_name}")


if __name__ == "__main__":
    main()
