"""Writes a tiny Llama checkpoint in compressed-tensors' integer layouts
(llm-compressor's save format), following the format's definition:
pack-quantized stores X.weight_packed (int32, 32 / bits values a word, value
i of a row at bits (i % per_word) * bits, each stored as q + 2^(bits-1)),
X.weight_scale [out, groups], X.weight_shape, and for asymmetric schemes
X.weight_zero_point packed the same way along the output dimension;
naive-quantized and int-quantized store X.weight as int8 with X.weight_scale
(int-quantized as llm-compressor writes W8A8: channel scales [out, 1] in
BF16, activations int8 per token, dynamic). Also writes
expected.safetensors: every tensor as this packer dequantizes it,
(q - zero_point) * scale in float32.

usage: compressed_tensors_pack.py DIR MODE
  MODE: int4_group | int4_group_asym | int8_naive | int8_w8a8 | missing_scale | shape_mismatch | unknown_format
"""
import json
import sys

import numpy as np

from tiny_llama_files import float_tensors, llama_config, projection_shapes, write_safetensors

HIDDEN, INTER, HEADS, KV_HEADS, VOCAB = 64, 96, 4, 2, 80


def pack_rows(values, bits):
    """values: int [rows, cols] signed; returns int32 [rows, ceil(cols * bits / 32)]."""
    per = 32 // bits
    rows, cols = values.shape
    padded = np.zeros((rows, (cols + per - 1) // per * per), np.uint64)
    padded[:, :cols] = (values + (1 << (bits - 1))).astype(np.uint64)
    shifts = (np.arange(per, dtype=np.uint64) * bits)
    words = (padded.reshape(rows, -1, per) << shifts).sum(axis=2).astype(np.uint32)
    return words.view(np.int32)


def bf16_round(x):
    """float32 values rounded to the nearest bfloat16 (ties to even), as float32."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def quantize(w, bits, group, symmetric, bf16=False):
    out, inp = w.shape
    g = inp if group is None else group
    ng = (inp + g - 1) // g
    lo_q, hi_q = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    q = np.zeros(w.shape, np.int64)
    scale = np.zeros((out, ng), np.float32)
    zero = np.zeros((out, ng), np.int64)
    for j in range(ng):
        blk = w[:, j * g:(j + 1) * g]
        if symmetric:
            s = np.abs(blk).max(axis=1) / hi_q
            z = np.zeros(out, np.int64)
        else:
            lo, hi = np.minimum(blk.min(axis=1), 0), np.maximum(blk.max(axis=1), 0)
            s = (hi - lo) / (hi_q - lo_q)
            z = np.clip(np.round(lo_q - lo / s), lo_q, hi_q).astype(np.int64)
        s = s.astype(np.float16).astype(np.float32) if bits == 4 else bf16_round(s) if bf16 else s.astype(np.float32)
        q[:, j * g:(j + 1) * g] = np.clip(np.round(blk / s[:, None]) + z[:, None], lo_q, hi_q)
        scale[:, j], zero[:, j] = s, z
    cols = np.arange(inp) // g
    deq = ((q - zero[:, cols]).astype(np.float32) * scale[:, cols]).astype(np.float32)
    return q, scale, zero, deq


def main():
    out_dir, mode = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(44)
    w8a8 = mode in ("int8_w8a8", "static_activations")
    bits = 8 if mode in ("int8_naive", "int8_w8a8") else 4
    fmt = ("int-quantized" if w8a8 else "naive-quantized") if bits == 8 else (
        "marlin-24" if mode == "unknown_format" else "pack-quantized")
    symmetric = mode != "int4_group_asym"
    group = None if bits == 8 else 32
    weights = {"num_bits": bits, "type": "int", "symmetric": symmetric,
               "strategy": "channel" if group is None else "group"}
    if group is not None:
        weights["group_size"] = group
    group_0 = {"targets": ["Linear"], "weights": weights}
    if w8a8:
        group_0["input_activations"] = {"num_bits": 8, "type": "int", "symmetric": True, "dynamic": True,
                                        "strategy": "token"}
    if mode == "static_activations":  # one calibrated scale per tensor (input_scale), which llmk refuses
        group_0["input_activations"].update(dynamic=False, strategy="tensor")
    config = llama_config(HIDDEN, INTER, HEADS, KV_HEADS, VOCAB,
                          quantization_config={"quant_method": "compressed-tensors", "format": fmt,
                                               "config_groups": {"group_0": group_0}, "ignore": ["lm_head"]})
    with open(f"{out_dir}/config.json", "w") as f:
        json.dump(config, f)
    if w8a8:  # the folder's own files beside config.json: no BOS, another EOS
        with open(f"{out_dir}/tokenizer_config.json", "w") as f:
            json.dump({"add_bos_token": False}, f)
        with open(f"{out_dir}/generation_config.json", "w") as f:
            json.dump({"bos_token_id": 1, "eos_token_id": [2, 7]}, f)
    shapes = projection_shapes(HIDDEN, INTER, HEADS, KV_HEADS)
    tensors, expected = {}, {}
    for name, arr in float_tensors(rng, HIDDEN, VOCAB).items():
        tensors[name] = expected[name] = ("F32", arr)
    for part, shape in shapes.items():
        base = f"model.layers.0.{part}."
        w = rng.normal(0, 1 / np.sqrt(shape[1]), shape).astype(np.float32)
        q, scale, zero, deq = quantize(w, bits, group, symmetric, bf16=w8a8)
        expected[base + "weight"] = ("F32", deq)
        if bits == 4:
            tensors[base + "weight_packed"] = ("I32", pack_rows(q, 4))
            tensors[base + "weight_scale"] = ("F16", scale.astype(np.float16))
            shp = list(shape) if not (mode == "shape_mismatch" and part == "mlp.up_proj") else [shape[1], shape[0]]
            tensors[base + "weight_shape"] = ("I64", np.array(shp, np.int64))
            if not symmetric:
                tensors[base + "weight_zero_point"] = ("I32", pack_rows(zero.T, 4).T.copy())
        else:
            tensors[base + "weight"] = ("I8", q.astype(np.int8))
            if w8a8:  # BF16 [out, 1]: the float32 scale's upper half
                tensors[base + "weight_scale"] = ("BF16", (scale.view(np.uint32) >> 16).astype(np.uint16))
            else:
                tensors[base + "weight_scale"] = ("F32", scale)
        if mode == "missing_scale" and part == "self_attn.o_proj":
            del tensors[base + "weight_scale"]
    write_safetensors(f"{out_dir}/model.safetensors", tensors)
    write_safetensors(f"{out_dir}/expected.safetensors", expected)


if __name__ == "__main__":
    main()
