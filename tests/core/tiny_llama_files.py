"""What the quantized-checkpoint packers of the core tests share (bnb_pack.py,
compressed_tensors_pack.py): a one-layer Llama's config.json, its
projection shapes and float tensors, and a safetensors writer."""
import json
import struct

import numpy as np


def write_safetensors(path, tensors):
    """tensors: name -> (safetensors dtype name, numpy array), written in order."""
    header, offset, blobs = {}, 0, []
    for name, (dtype, arr) in tensors.items():
        data = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def llama_config(hidden, inter, heads, kv_heads, vocab, **extra):
    """config.json of a one-layer Llama, with `extra` keys added."""
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
              "intermediate_size": inter, "num_hidden_layers": 1, "num_attention_heads": heads,
              "num_key_value_heads": kv_heads, "vocab_size": vocab, "max_position_embeddings": 128,
              "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False}
    config.update(extra)
    return config


def projection_shapes(hidden, inter, heads, kv_heads):
    """[out, in] of layer 0's seven projections, by their names under model.layers.0."""
    head = hidden // heads
    return {"self_attn.q_proj": (hidden, hidden), "self_attn.k_proj": (kv_heads * head, hidden),
            "self_attn.v_proj": (kv_heads * head, hidden), "self_attn.o_proj": (hidden, hidden),
            "mlp.gate_proj": (inter, hidden), "mlp.up_proj": (inter, hidden), "mlp.down_proj": (hidden, inter)}


def float_tensors(rng, hidden, vocab):
    """The tensors kept in F32: embeddings, LM head and the three norms."""
    return {"model.embed_tokens.weight": rng.normal(0, 0.02, (vocab, hidden)).astype(np.float32),
            "lm_head.weight": rng.normal(0, 0.05, (vocab, hidden)).astype(np.float32),
            "model.norm.weight": (1 + rng.normal(0, 0.1, hidden)).astype(np.float32),
            "model.layers.0.input_layernorm.weight": (1 + rng.normal(0, 0.1, hidden)).astype(np.float32),
            "model.layers.0.post_attention_layernorm.weight": (1 + rng.normal(0, 0.1, hidden)).astype(np.float32)}
