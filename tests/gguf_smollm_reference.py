#!/usr/bin/env python3
"""float64 reference of a real llama-architecture GGUF (SmolLM2-135M-Instruct
Q4_1), independent of llmk and of llama.cpp's runtime: PyPI gguf reads the
file and dequantizes every tensor (gguf.quants), the Q/K rows are put back
in Hugging Face's order (llama.cpp's converter interleaves each head's
rotary halves), and tests/arch_reference.py's float64 forward runs the
model with the file's hyperparameters.

  gguf_smollm_reference.py MODEL.gguf OUT_DIR WORD... 

The prompt is the vocabulary ids of WORDs, each looked up as one token
(byte-level BPE spelling: "Ġ" for a leading space). Writes
  OUT_DIR/reference.json   {"input_ids", "greedy_ids"}: NUM_GENERATED greedy
                           tokens, the whole sequence re-run each step
  OUT_DIR/logits.f64       float64 [len(input_ids), vocab] prompt logits
"""
import json
import sys
from pathlib import Path

import numpy as np
import gguf

sys.path.insert(0, str(Path(__file__).resolve().parent))
import arch_reference as ref  # noqa: E402

NUM_GENERATED = 6
NAMES = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
         "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
         "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def unpermute(w, n_head):
    """Inverse of the converter's permute: rows (2i, 2i+1) of a head back to (i, i + d/2)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main(model, out_dir, words):
    r = gguf.GGUFReader(model)

    def field(key):
        return r.fields[key].contents()

    assert field("general.architecture") == "llama"
    heads, kv_heads = field("llama.attention.head_count"), field("llama.attention.head_count_kv")
    tokens = field("tokenizer.ggml.tokens")
    ref.BASE.update(hidden=field("llama.embedding_length"), inter=field("llama.feed_forward_length"),
                    layers=field("llama.block_count"), heads=heads, kv_heads=kv_heads, vocab=len(tokens),
                    eps=field("llama.attention.layer_norm_rms_epsilon"))
    names = {t.name for t in r.tensors}
    spec = dict(theta=field("llama.rope.freq_base"), tied="output.weight" not in names, bias=False, window=None,
                scaling=None)
    w = {}
    for t in r.tensors:
        shape = tuple(int(d) for d in reversed(t.shape))
        x = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        if t.name == "token_embd.weight":
            w["model.embed_tokens.weight"] = x
        elif t.name == "output_norm.weight":
            w["model.norm.weight"] = x
        elif t.name == "output.weight":
            w["lm_head.weight"] = x
        else:
            _, layer, kind, _ = t.name.split(".")
            if kind == "attn_q":
                x = unpermute(x, heads)
            elif kind == "attn_k":
                x = unpermute(x, kv_heads)
            w[f"model.layers.{layer}.{NAMES[kind]}.weight"] = x
    ids = [tokens.index(word) for word in words]
    logits = ref.forward(w, spec, ids)
    seq = list(ids)
    for _ in range(NUM_GENERATED):
        seq.append(int(np.argmax(ref.forward(w, spec, seq)[-1])))
    out = Path(out_dir)
    logits.astype(np.float64).tofile(out / "logits.f64")
    (out / "reference.json").write_text(json.dumps({"input_ids": ids, "greedy_ids": seq[len(ids):]}))


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(f"usage: {sys.argv[0]} MODEL.gguf OUT_DIR WORD...")
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
