"""Writes a tiny Llama checkpoint in bitsandbytes' 4-bit safetensors layout
(transformers' save_pretrained of a load_in_4bit model), following the
format as bitsandbytes defines it: per quantized weight W, W (uint8, two
codes a byte, the first in the high nibble), W.absmax (one scale per
blocksize values of the flattened weight; with double quantization uint8
codes of those scales minus their mean, with W.nested_absmax and
W.nested_quant_map), W.quant_map (16 values) and
W.quant_state.bitsandbytes__nf4 (uint8 bytes of a JSON object). Also writes
expected.safetensors: every tensor as this packer dequantizes it, in
float32 arithmetic (quant_map[code] * absmax, nested: map[code] *
nested_absmax + offset).

usage: bnb_pack.py DIR [good|no_absmax|quant_map_15|shape_mismatch|nested_missing]
"""
import json
import sys

import numpy as np

from tiny_llama_files import float_tensors, llama_config, projection_shapes, write_safetensors

# NF4 (QLoRA, Dettmers et al. 2023, appendix E; bitsandbytes' quant_map).
NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], dtype=np.float32)
HIDDEN, INTER, HEADS, KV_HEADS, VOCAB = 64, 128, 4, 2, 96
BLOCK, NESTED_BLOCK = 64, 256


def nearest(values, table):
    return np.abs(values[:, None] - table[None, :]).argmin(axis=1)


def quantize_nf4(w, double, rng):
    flat = w.reshape(-1).astype(np.float32)
    n = flat.size
    blocks = (n + BLOCK - 1) // BLOCK
    padded = np.zeros(blocks * BLOCK, np.float32)
    padded[:n] = flat
    absmax = np.abs(padded.reshape(blocks, BLOCK)).max(axis=1).astype(np.float32)
    scaled = padded / np.repeat(np.where(absmax == 0, 1, absmax), BLOCK)
    codes = nearest(scaled, NF4)[:n].astype(np.uint8)
    if n % 2:
        codes = np.append(codes, 0)
    packed = ((codes[0::2] << 4) | codes[1::2]).astype(np.uint8).reshape(-1, 1)
    out = {"quant_map": NF4.copy()}
    state = {"quant_type": "nf4", "blocksize": BLOCK, "dtype": "bfloat16", "shape": list(w.shape)}
    if double:
        offset = np.float32(absmax.mean())
        centred = (absmax - offset).astype(np.float32)
        nblocks = (blocks + NESTED_BLOCK - 1) // NESTED_BLOCK
        cpad = np.zeros(nblocks * NESTED_BLOCK, np.float32)
        cpad[:blocks] = centred
        nested_absmax = np.abs(cpad.reshape(nblocks, NESTED_BLOCK)).max(axis=1).astype(np.float32)
        # Any 256 values serve the format (bitsandbytes' own is its "dynamic" map).
        nested_map = np.linspace(-1, 1, 256, dtype=np.float32)
        norm = cpad / np.repeat(np.where(nested_absmax == 0, 1, nested_absmax), NESTED_BLOCK)
        abs_codes = nearest(norm, nested_map)[:blocks].astype(np.uint8)
        out.update(absmax=abs_codes, nested_absmax=nested_absmax, nested_quant_map=nested_map)
        state.update(nested_blocksize=NESTED_BLOCK, nested_offset=float(offset), nested_dtype="float32")
        scales = (nested_map[abs_codes] * nested_absmax[np.arange(blocks) // NESTED_BLOCK]).astype(np.float32)
        scales = (scales + offset).astype(np.float32)
    else:
        out["absmax"] = absmax
        scales = absmax
    deq = (NF4[codes[:n]] * scales[np.arange(n) // BLOCK]).astype(np.float32).reshape(w.shape)
    return packed, out, state, deq


def main():
    out_dir, mode = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "good"
    rng = np.random.default_rng(43)
    config = llama_config(HIDDEN, INTER, HEADS, KV_HEADS, VOCAB, torch_dtype="bfloat16",
                          quantization_config={"quant_method": "bitsandbytes", "load_in_4bit": True,
                                               "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True})
    with open(f"{out_dir}/config.json", "w") as f:
        json.dump(config, f)
    shapes = projection_shapes(HIDDEN, INTER, HEADS, KV_HEADS)
    tensors, expected = {}, {}
    for name, arr in float_tensors(rng, HIDDEN, VOCAB).items():
        tensors[name] = expected[name] = ("F32", arr)
    for i, (part, shape) in enumerate(shapes.items()):
        name = f"model.layers.0.{part}.weight"
        w = rng.normal(0, 1 / np.sqrt(shape[1]), shape).astype(np.float32)
        packed, extra, state, deq = quantize_nf4(w, double=i % 2 == 0, rng=rng)
        tensors[name] = ("U8", packed)
        for k, v in extra.items():
            tensors[f"{name}.{k}"] = ("U8" if v.dtype == np.uint8 else "F32", v)
        if mode == "shape_mismatch" and part == "mlp.up_proj":
            state["shape"] = [shape[1], shape[0]]
        blob = np.frombuffer(json.dumps(state).encode(), dtype=np.uint8)
        tensors[f"{name}.quant_state.bitsandbytes__nf4"] = ("U8", blob)
        expected[name] = ("F32", deq)
    if mode == "no_absmax":
        del tensors["model.layers.0.self_attn.k_proj.weight.absmax"]
    elif mode == "quant_map_15":
        tensors["model.layers.0.self_attn.o_proj.weight.quant_map"] = ("F32", NF4[:15].copy())
    elif mode == "nested_missing":
        del tensors["model.layers.0.mlp.gate_proj.weight.nested_absmax"]
    write_safetensors(f"{out_dir}/model.safetensors", tensors)
    write_safetensors(f"{out_dir}/expected.safetensors", expected)


if __name__ == "__main__":
    main()
