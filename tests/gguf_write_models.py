#!/usr/bin/env python3
"""Writes GGUF test files with PyPI's `gguf` package (llama.cpp's own writer
and quantizers), the independent reference for llmk's GGUF reader.

  stories  MODEL_DIR OUT.gguf f32|q8_0   a Hugging Face Llama directory as
           llama.cpp's converter writes it: Q/K rows permuted per head, the
           sentencepiece vocabulary in tokenizer.ggml.*; q8_0 quantizes every
           matrix whose rows are whole 32-value blocks (the rest stay F16, as
           the converter falls back), norms stay F32.
  quants   OUT_DIR SEED                  one GGUF per type llmk decodes
           (DECODED) holding a tensor of odd row count (random blocks with
           sane f16 scales, edge blocks), plus NAME.f32: gguf.quants' own
           dequantization of the same bytes.
  metadata OUT.gguf                      every metadata value type, arrays
           and nested arrays, general.alignment 64, three small tensors.
  kquant   OUT_QUANT.gguf OUT_F32.gguf       a two-layer model mixing every
           quantized type llmk decodes, and its F32 twin (gguf.quants'
           dequantization).
  type-sizes OUT.json                        gguf's block sizes of every type.
  chat     OUT.gguf 0|1                      vocabulary metadata with a chat
           template (and a tool_use one when 1), no tensors.
  tiny     OUT.gguf llama|qwen2 [VARIANT...]   a 2-layer random model (see
           write_tiny for the variants).
  bpe-tokenizer TOKENIZER_JSON PRE OUT.gguf   a Hugging Face byte-level BPE
           tokenizer.json's vocabulary as llama.cpp's converter stores it:
           tokens in id order, added tokens typed control (special) or
           user-defined, merges, tokenizer.ggml.pre = PRE, the BOS the
           post-processor adds. No tensors.
"""
import json
import struct
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V


def read_safetensors(path):
    raw = Path(path).read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    dtypes = {"F32": np.float32, "F16": np.float16}
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[b:end], dtype=dtypes[e["dtype"]]).reshape(e["shape"]).astype(np.float32)
    return out


def proto_fields(buf):
    """(field, wire_type, value) of one protocol-buffer message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        elif wire == 2:
            n, i = varint(buf, i)
            value, i = buf[i : i + n], i + n
        else:
            raise ValueError(f"wire type {wire}")
        yield field, wire, value


def varint(buf, i):
    result = shift = 0
    while True:
        c = buf[i]
        i += 1
        result |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return result, i


def sentencepiece_vocab(model_file):
    """(pieces, scores, types) of a sentencepiece tokenizer.model: field 1 of
    ModelProto, each {1: piece, 2: score, 3: type (default NORMAL=1)}."""
    pieces, scores, types = [], [], []
    for field, _, value in proto_fields(Path(model_file).read_bytes()):
        if field != 1:
            continue
        piece, score, kind = b"", 0.0, 1
        for f, _, v in proto_fields(value):
            if f == 1:
                piece = bytes(v)
            elif f == 2:
                score = struct.unpack("<f", v)[0]
            elif f == 3:
                kind = v
        pieces.append(piece)
        scores.append(score)
        types.append(kind)
    return pieces, scores, types


def permute(w, n_head):
    """llama.cpp's converter: each head's rows (i, i + d/2) become (2i, 2i+1)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def add_matrix(writer, name, w, qtype):
    if qtype == Q.Q8_0 and w.ndim == 2 and w.shape[1] % 32 == 0:
        writer.add_tensor(name, gguf.quants.quantize(w, Q.Q8_0), raw_dtype=Q.Q8_0)
    elif qtype == Q.Q8_0 and w.ndim == 2:
        writer.add_tensor(name, w.astype(np.float16))
    else:
        writer.add_tensor(name, w.astype(np.float32))


def write_stories(model_dir, out, kind):
    model_dir = Path(model_dir)
    cfg = json.loads((model_dir / "config.json").read_text())
    weights = read_safetensors(model_dir / "model.safetensors")
    n_head, n_kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    qtype = Q.Q8_0 if kind == "q8_0" else Q.F32
    w = gguf.GGUFWriter(out, "llama")
    w.add_name("stories260K")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_rope_dimension_count(cfg["hidden_size"] // n_head)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if kind == "q8_0" else gguf.LlamaFileType.ALL_F32)
    pieces, scores, types = sentencepiece_vocab(model_dir / "tokenizer.model")
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    add_matrix(w, "token_embd.weight", weights["model.embed_tokens.weight"], qtype)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", weights[p + "input_layernorm.weight"])
        add_matrix(w, f"blk.{i}.attn_q.weight", permute(weights[p + "self_attn.q_proj.weight"], n_head), qtype)
        add_matrix(w, f"blk.{i}.attn_k.weight", permute(weights[p + "self_attn.k_proj.weight"], n_kv), qtype)
        add_matrix(w, f"blk.{i}.attn_v.weight", weights[p + "self_attn.v_proj.weight"], qtype)
        add_matrix(w, f"blk.{i}.attn_output.weight", weights[p + "self_attn.o_proj.weight"], qtype)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", weights[p + "post_attention_layernorm.weight"])
        add_matrix(w, f"blk.{i}.ffn_gate.weight", weights[p + "mlp.gate_proj.weight"], qtype)
        add_matrix(w, f"blk.{i}.ffn_up.weight", weights[p + "mlp.up_proj.weight"], qtype)
        add_matrix(w, f"blk.{i}.ffn_down.weight", weights[p + "mlp.down_proj.weight"], qtype)
    w.add_tensor("output_norm.weight", weights["model.norm.weight"])
    if not cfg.get("tie_word_embeddings", False):
        add_matrix(w, "output.weight", weights["lm_head.weight"], qtype)
    finish(w)


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# Byte offsets of each decoded type's f16 scale fields within a block.
F16_FIELDS = {
    Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0], Q.Q2_K: [80, 82], Q.Q3_K: [108],
    Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208], Q.IQ4_NL: [0], Q.IQ4_XS: [0], Q.TQ1_0: [52], Q.TQ2_0: [64],
    Q.MXFP4: [],  # its scale is a one-byte exponent: every byte value is valid
}
# The types llmk decodes, as gguf.quants names them.
DECODED = [Q.F32, Q.F16, Q.BF16, *F16_FIELDS]


def edge_blocks(qtype, scale_bits):
    """Blocks of all-zero and all-one quant bits, under a given f16 scale."""
    size = gguf.GGML_QUANT_SIZES[qtype][1]
    out = []
    for fill in (0x00, 0xFF, 0x55, 0xAA):
        block = np.full(size, fill, dtype=np.uint8)
        for at in F16_FIELDS[qtype]:
            block[at : at + 2] = np.array([scale_bits], dtype=np.uint16).view(np.uint8)
        out.append(block)
    return out


def quant_test_blocks(rng, qtype, num_blocks):
    """num_blocks blocks of random bytes with finite f16 scales (normal,
    negative, zero, subnormal, the largest half), edge blocks first."""
    size = gguf.GGML_QUANT_SIZES[qtype][1]
    blocks = rng.integers(0, 256, size=(num_blocks, size), dtype=np.uint8)
    fields = F16_FIELDS[qtype]
    if fields:
        scales = rng.uniform(-0.05, 0.05, size=(num_blocks, len(fields))).astype(np.float16)
        scales.reshape(-1)[:: 7] = np.float16(0.0)
        scales.reshape(-1)[3 :: 11] = np.array([0x0001], np.uint16).view(np.float16)[0]  # smallest subnormal
        scales.reshape(-1)[5 :: 13] = np.array([0x03FF], np.uint16).view(np.float16)[0]  # largest subnormal
        scales.reshape(-1)[6 :: 17] = np.float16(-65504.0)
        raw = scales.view(np.uint8)
        for k, at in enumerate(fields):
            blocks[:, at : at + 2] = raw[:, 2 * k : 2 * k + 2]
    edges = edge_blocks(qtype, 0x3C00) + edge_blocks(qtype, 0xBC00) + edge_blocks(qtype, 0x0001)
    blocks[: len(edges)] = np.stack(edges)[:num_blocks]
    return blocks


def write_quants(out_dir, seed):
    """Per decoded type, NAME.gguf holding tensor "t" of 7 rows (odd on
    purpose) of several blocks each, and NAME.f32: gguf.quants.dequantize of
    exactly those bytes. Plain types hold every bit pattern (F16: all 65536,
    NaN payloads included)."""
    out_dir = Path(out_dir)
    rng = np.random.default_rng(int(seed))
    rows = 7
    for qtype in DECODED:
        block_values, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        if qtype == Q.F16:
            cols = 65536 // rows + 1
            bits = np.concatenate([np.arange(65536, dtype=np.uint16), rng.integers(0, 65536, rows * cols - 65536, dtype=np.uint16)])
            stored = bits.view(np.uint8).reshape(rows, -1)
        elif qtype in (Q.F32, Q.BF16):
            cols = 33
            stored = rng.integers(0, 256, size=(rows, cols * block_bytes), dtype=np.uint8)
        else:
            per_row = 5 if block_values == 32 else 3
            cols = per_row * block_values
            stored = quant_test_blocks(rng, qtype, rows * per_row).reshape(rows, -1)
        w = gguf.GGUFWriter(out_dir / f"{qtype.name}.gguf", "llama")
        w.add_tensor("t", stored, raw_dtype=qtype)
        finish(w)
        with np.errstate(over="ignore", invalid="ignore"):  # MXFP4 edge blocks overflow to infinity
            reference = np.asarray(gguf.quants.dequantize(stored, qtype))
        assert reference.dtype == np.float32 and reference.size == rows * cols
        reference.tofile(out_dir / f"{qtype.name}.f32")


def write_metadata(out):
    w = gguf.GGUFWriter(out, "llama")
    w.data_alignment = 64
    w.add_uint32("general.alignment", 64)
    w.add_key_value("t.u8", 200, V.UINT8)
    w.add_key_value("t.i8", -100, V.INT8)
    w.add_key_value("t.u16", 60000, V.UINT16)
    w.add_key_value("t.i16", -30000, V.INT16)
    w.add_key_value("t.u32", 4000000000, V.UINT32)
    w.add_key_value("t.i32", -2000000000, V.INT32)
    w.add_key_value("t.f32", 0.25, V.FLOAT32)
    w.add_key_value("t.bool", True, V.BOOL)
    w.add_key_value("t.string", "héllo wörld", V.STRING)
    w.add_key_value("t.u64", 18000000000000000000, V.UINT64)
    w.add_key_value("t.i64", -9000000000000000000, V.INT64)
    w.add_key_value("t.f64", -1.5e300, V.FLOAT64)
    w.add_array("t.ints", [1, -2, 3])
    w.add_array("t.strings", ["a", "", "ccc"])
    w.add_array("t.nested", [[1, 2], [3], ["x", "yz"]])
    w.add_tensor("a", np.arange(5, dtype=np.float32))
    w.add_tensor("b", np.arange(6, dtype=np.float16).reshape(2, 3))
    w.add_tensor("c", np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    finish(w)


def write_tiny(out, arch, variants):
    """Variants: bias (qwen2 q/k/v biases), tied (no output.weight), f16 (every
    matrix F16), mixed (one F16 projection among F32 ones), q4_1 (one Q4_1
    projection), iq2_xxs (one IQ2_XXS projection of random blocks), drop (no blk.1.ffn_up), badshape (blk.0.attn_k one row
    short), extra (an unknown tensor), rope_freqs (llama3 scaling factors, all
    1), rope_freqs_short (one factor too few), yarn (rope.scaling.type yarn)."""
    rng = np.random.default_rng(3)
    hidden, inter, layers, heads, kv, vocab = 32, 64, 2, 4, 2, 48
    if "iq2_xxs" in variants:
        inter = 256  # ffn_down's rows: one 256-value block
    w = gguf.GGUFWriter(out, arch)
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(inter)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(vocab)
    if "yarn" in variants:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(4.0)
    hd = hidden // heads

    def mat(name, *shape):
        x = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        if name == "blk.0.attn_k.weight" and "badshape" in variants:
            x = x[:-1]
        if name == "blk.1.ffn_up.weight" and "drop" in variants:
            return
        if name == "blk.1.ffn_gate.weight" and "q4_1" in variants:
            w.add_tensor(name, gguf.quants.quantize(x, Q.Q4_1), raw_dtype=Q.Q4_1)
        elif name == "blk.1.ffn_down.weight" and "iq2_xxs" in variants:
            size = gguf.GGML_QUANT_SIZES[Q.IQ2_XXS][1]
            w.add_tensor(name, rng.integers(0, 256, size=(x.shape[0], size), dtype=np.uint8), raw_dtype=Q.IQ2_XXS)
        elif x.ndim == 2 and ("f16" in variants or (name == "blk.0.attn_v.weight" and "mixed" in variants)):
            w.add_tensor(name, x.astype(np.float16))
        else:
            w.add_tensor(name, x)

    mat("token_embd.weight", vocab, hidden)
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
        mat(f"blk.{i}.attn_q.weight", heads * hd, hidden)
        mat(f"blk.{i}.attn_k.weight", kv * hd, hidden)
        mat(f"blk.{i}.attn_v.weight", kv * hd, hidden)
        if "bias" in variants:
            mat(f"blk.{i}.attn_q.bias", heads * hd)
            mat(f"blk.{i}.attn_k.bias", kv * hd)
            mat(f"blk.{i}.attn_v.bias", kv * hd)
        mat(f"blk.{i}.attn_output.weight", hidden, heads * hd)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, np.float32))
        mat(f"blk.{i}.ffn_gate.weight", inter, hidden)
        mat(f"blk.{i}.ffn_up.weight", inter, hidden)
        mat(f"blk.{i}.ffn_down.weight", hidden, inter)
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    if "tied" not in variants:
        mat("output.weight", vocab, hidden)
    if "extra" in variants:
        mat("blk.0.attn_qkv.weight", 3 * hidden, hidden)
    if "rope_freqs" in variants:
        w.add_tensor("rope_freqs.weight", np.ones(hd // 2, np.float32))
    if "rope_freqs_short" in variants:
        w.add_tensor("rope_freqs.weight", np.ones(hd // 2 - 1, np.float32))
    finish(w)


# Per type, the largest |scale * quant| a block can produce: test blocks get
# f16 scales of about 0.1 / this, for O(1) activations.
SCALE_RANGE = {Q.Q2_K: 45, Q.Q3_K: 128, Q.Q4_K: 945, Q.Q5_K: 1953, Q.Q6_K: 4064, Q.IQ4_NL: 127, Q.IQ4_XS: 4064}


def mixed_blocks(rng, qtype, rows, cols):
    """rows x cols values of qtype: gguf.quants' encoder where it has one,
    else random blocks with small f16 scales."""
    try:
        return gguf.quants.quantize((rng.standard_normal((rows, cols)) * 0.05).astype(np.float32), qtype)
    except NotImplementedError:
        pass
    block_values, size = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(rows * cols // block_values, size), dtype=np.uint8)
    limit = 0.1 / SCALE_RANGE[qtype]
    for at in F16_FIELDS[qtype]:
        blocks[:, at : at + 2] = rng.uniform(-limit, limit, size=(blocks.shape[0], 1)).astype(np.float16).view(np.uint8)
    return blocks.reshape(rows, -1)


def write_kquant_pair(out_quant, out_f32):
    """A two-layer llama whose tensors mix every quantized type llmk decodes
    (as llama.cpp's Q4_K_M and friends mix Q4_K, Q5_0, Q6_K, Q8_0 across
    tensors), and its twin holding gguf.quants' F32 dequantization of
    exactly those blocks."""
    rng = np.random.default_rng(11)
    hidden, inter, heads, kv, vocab = 256, 512, 4, 2, 64
    hd = hidden // heads
    files = [gguf.GGUFWriter(out_quant, "llama"), gguf.GGUFWriter(out_f32, "llama")]
    for w in files:
        w.add_context_length(128)
        w.add_embedding_length(hidden)
        w.add_block_count(2)
        w.add_feed_forward_length(inter)
        w.add_head_count(heads)
        w.add_head_count_kv(kv)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_vocab_size(vocab)

    def add(name, rows, cols, qtype):
        stored = mixed_blocks(rng, qtype, rows, cols)
        files[0].add_tensor(name, stored, raw_dtype=qtype)
        files[1].add_tensor(name, gguf.quants.dequantize(stored, qtype).astype(np.float32).reshape(rows, cols))

    add("token_embd.weight", vocab, hidden, Q.Q6_K)
    for w in files:
        w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    layer_types = [
        [Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0],
        [Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.IQ4_NL, Q.IQ4_XS, Q.TQ1_0, Q.TQ2_0],
    ]
    for i, (tq, tk, tv, to, tg, tu, td) in enumerate(layer_types):
        for w in files:
            w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
            w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, np.float32))
        add(f"blk.{i}.attn_q.weight", heads * hd, hidden, tq)
        add(f"blk.{i}.attn_k.weight", kv * hd, hidden, tk)
        add(f"blk.{i}.attn_v.weight", kv * hd, hidden, tv)
        add(f"blk.{i}.attn_output.weight", hidden, heads * hd, to)
        add(f"blk.{i}.ffn_gate.weight", inter, hidden, tg)
        add(f"blk.{i}.ffn_up.weight", inter, hidden, tu)
        add(f"blk.{i}.ffn_down.weight", hidden, inter, td)
    add("output.weight", vocab, hidden, Q.MXFP4)
    for w in files:
        finish(w)


def write_type_sizes(out):
    """{id: [name, block values, block bytes]} of every type gguf knows."""
    sizes = {int(t): [t.name, *gguf.GGML_QUANT_SIZES[t]] for t in Q if t in gguf.GGML_QUANT_SIZES}
    Path(out).write_text(json.dumps(sizes))


def write_chat(out, with_tool_use):
    """Vocabulary metadata (no tensors) with a chat template that uses
    bos_token and eos_token, and a named tool_use template when asked."""
    tokens = ["<unk>", "<|im_start|>", "<|im_end|>", "<pad>", "a", "b"]
    w = gguf.GGUFWriter(out, "llama")
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_merges([])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(3)
    templates = [{"name": "default", "template": CHAT_TEMPLATE}]
    if with_tool_use == "1":
        templates.append({"name": "tool_use", "template": TOOL_TEMPLATE})
    w.add_chat_template(templates)
    finish(w)


CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] | trim }}"
    "{{ eos_token }}{% if not loop.last %}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}\n<|im_start|>assistant\n{% endif %}[{{ unk_token }}|{{ pad_token }}]"
)
TOOL_TEMPLATE = "TOOLS {{ tools | length }} {% for m in messages %}{{ m['content'] }}{{ eos_token }}{% endfor %}"


def write_bpe_tokenizer(tokenizer_json, pre, out):
    doc = json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))
    model = doc["model"]
    tokens = {i: t for t, i in model["vocab"].items()}
    types = {i: gguf.TokenType.NORMAL for i in tokens}
    for added in doc.get("added_tokens", []):
        tokens[added["id"]] = added["content"]
        types[added["id"]] = gguf.TokenType.CONTROL if added["special"] else gguf.TokenType.USER_DEFINED
    n = max(tokens) + 1
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    w = gguf.GGUFWriter(out, "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list([tokens.get(i, f"[PAD{i}]") for i in range(n)])
    w.add_token_types([int(types.get(i, gguf.TokenType.UNUSED)) for i in range(n)])
    w.add_token_merges(merges)
    bos = None
    post = doc.get("post_processor") or {}
    steps = post.get("processors", [post]) if post.get("type") == "Sequence" else [post]
    for step in steps:
        if step.get("type") == "TemplateProcessing":
            first = step["single"][0]
            if "SpecialToken" in first:
                bos = step["special_tokens"][first["SpecialToken"]["id"]]["ids"][0]
    if bos is not None:
        w.add_bos_token_id(bos)
    w.add_add_bos_token(bos is not None)
    finish(w)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "stories":
        write_stories(*args)
    elif cmd == "quants":
        write_quants(*args)
    elif cmd == "metadata":
        write_metadata(*args)
    elif cmd == "kquant":
        write_kquant_pair(*args)
    elif cmd == "tiny":
        write_tiny(args[0], args[1], args[2:])
    elif cmd == "type-sizes":
        write_type_sizes(*args)
    elif cmd == "chat":
        write_chat(*args)
    elif cmd == "bpe-tokenizer":
        write_bpe_tokenizer(*args)
    else:
        sys.exit(f"unknown command {cmd}")
