// Llama- and Qwen2-architecture models from a GGUF file (llama.cpp's format).
//
// Metadata -> ModelConfig: {arch}.embedding_length, block_count,
// feed_forward_length, attention.head_count, attention.head_count_kv,
// attention.key_length, attention.layer_norm_rms_epsilon, context_length,
// rope.freq_base, and the vocabulary size ({arch}.vocab_size, else the
// token list, else token_embd's rows); the tokenizer's special ids and
// add_bos_token from tokenizer.ggml.*; rope scaling from rope.scaling.type
// "linear" + rope.scaling.factor, and the rope_freqs tensor (per-frequency
// divisors: how llama.cpp stores llama3 scaling); attention.sliding_window;
// Qwen2 q/k/v biases (blk.N.attn_q/k/v.bias) when the file has them.
// Refused with Error(unsupported): other architectures, other rope scaling
// types (yarn, longrope), partial rotary (rope.dimension_count != head_dim),
// tensor types dequantize_ggml cannot decode (the IQ1/IQ2/IQ3 families,
// NVFP4, Q1_0, integers, F64: named, with the list of those it can).
//
// Tensors get the engine's (Hugging Face) names: token_embd ->
// model.embed_tokens, blk.N.attn_q/k/v/output -> self_attn.q/k/v/o_proj,
// ffn_gate/up/down -> mlp.*_proj, attn_norm -> input_layernorm, ffn_norm ->
// post_attention_layernorm, output_norm -> model.norm, output -> lm_head
// (absent: tied embeddings).
//
// Storage: every tensor keeps its stored type, in place from the mapping
// (quantized ones as ggml blocks, core/dtype.hpp); a layer may mix types, as
// llama.cpp's Q4_K_M files do. Whether a quantized weight is computed on as
// it is or dequantized at load is the linear plugins' choice
// (core/model_weights.hpp).
//
// llama.cpp's converter reorders the rows of every llama-architecture Q and
// K projection so that each head's rotary pairs are adjacent (rows 2i, 2i+1)
// instead of half a head apart (rows i, i + head_dim/2) as Hugging Face
// stores them; the loader restores Hugging Face's order, which the engine's
// RoPE expects. Qwen2 files are stored unpermuted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "core/checkpoint.hpp"
#include "core/gguf.hpp"

namespace llmk {

ModelConfig gguf_model_config(const GgufFile& file);
// Maps only the file's header: the config without loading weights.
ModelConfig load_gguf_model_config(const std::filesystem::path& file);

// The engine's name for a GGUF tensor name, e.g. "blk.3.attn_q.weight" ->
// "model.layers.3.self_attn.q_proj.weight" (biases likewise, ".bias");
// empty when the name is not one the engine knows.
std::string gguf_to_hf_tensor_name(const std::string& gguf_name);

// Undoes llama.cpp's rotary row permutation of a Q or K projection:
// src, dst: [num_heads * head_dim rows, row_bytes each], head_dim even.
// dst row h*head_dim + s*head_dim/2 + i takes src row h*head_dim + 2*i + s.
void unpermute_rotary_rows(const uint8_t* src, uint8_t* dst, int64_t num_heads, int64_t head_dim, size_t row_bytes);

// Loads and validates a GGUF model; the file's tokenizer (if its metadata
// has one) becomes the checkpoint's tokenizer_path, i.e. the .gguf itself.
std::unique_ptr<Checkpoint> load_gguf_checkpoint(const std::filesystem::path& file);
// The same over an already validated file; source() and the tokenizer path
// are its name().
std::unique_ptr<Checkpoint> load_gguf_checkpoint(std::unique_ptr<GgufFile> file);

}  // namespace llmk
