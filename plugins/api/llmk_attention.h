/* llmk attention plugin API (kind LLMK_PLUGIN_ATTENTION).
 *
 * One call serves one layer of one step: a flattened batch of sequences with
 * no padding, where each sequence contributes either a prefill chunk (many new
 * tokens) or a decode (one new token). The plugin first writes the new K/V
 * into the layer's cache at slot_mapping, then computes causal attention of
 * every new query over its sequence's context (GQA: query head h reads KV
 * head h / (num_heads / num_kv_heads)). With desc.sliding_window = W > 0 a
 * query at position p sees only positions (p - W, p], i.e. max(0, p - W + 1)
 * .. p (Mistral's sliding window); every path (prefill, chunked prefill on a
 * cached prefix, decode) and every KV dtype must honour it. The cache still
 * holds the older positions: reclaiming them is the allocator's business,
 * not the plugin's. A plugin may route prefill chunks and decodes to
 * different kernels.
 *
 * KV addressing, shared by every allocator: token position p of sequence s
 * lives at physical slot  block_tables[s * max_blocks_per_seq + p / block_size]
 * + p % block_size.  Table entries are the first physical slot of each block,
 * so a paged allocator stores block_index * block_size and a contiguous range
 * is one entry with block_size >= the range length. */
#ifndef LLMK_ATTENTION_H
#define LLMK_ATTENTION_H

#include "llmk_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2: llmk_attention_desc gained sliding_window. */
#define LLMK_ATTENTION_API_VERSION 2u

typedef struct llmk_attention_desc {
  uint32_t struct_size;
  uint32_t num_heads;
  uint32_t num_kv_heads;   /* divides num_heads */
  uint32_t head_dim;
  float scale;             /* softmax scale, usually 1/sqrt(head_dim) */
  uint32_t kv_dtype;       /* LLMK_DTYPE_F32, LLMK_DTYPE_F16, or LLMK_DTYPE_I8 for the group-quantized cache */
  uint32_t kv_group_size;  /* I8 only: elements of head_dim sharing one scale; divides head_dim */
  uint32_t max_context;    /* longest context a sequence may reach */
  uint32_t max_tokens;     /* most new tokens in one call */
  uint32_t num_threads;    /* CPU plugins: worker threads to use */
  const char* options;     /* JSON object of plugin options from config, "{}" when none */
  uint32_t sliding_window; /* keys visible to a query, itself included; 0 = the whole context */
} llmk_attention_desc;

/* One layer's cache. For F32: k, v are float[num_slots][num_kv_heads][head_dim].
 * For F16: the same layout of IEEE binary16 values (uint16_t bits).
 * For I8: k, v are int8_t[num_slots][num_kv_heads][head_dim] and
 * k_scale, v_scale are float[num_slots][num_kv_heads][head_dim / kv_group_size]
 * (value = int8 * scale, symmetric). Scales are NULL for F32 and F16.
 * A negative slot_mapping entry is a row whose K/V is not stored (padding). */
typedef struct llmk_kv_layer {
  void* k;
  void* v;
  float* k_scale;
  float* v_scale;
  uint32_t num_slots;
} llmk_kv_layer;

typedef struct llmk_attention_args {
  uint32_t struct_size;
  uint32_t num_tokens;            /* new tokens in this step, all sequences */
  uint32_t num_seqs;
  const float* q;                 /* [num_tokens, num_heads, head_dim], RoPE applied */
  const float* k;                 /* [num_tokens, num_kv_heads, head_dim], RoPE applied */
  const float* v;                 /* [num_tokens, num_kv_heads, head_dim] */
  float* out;                     /* [num_tokens, num_heads, head_dim] */
  const int32_t* query_start;     /* [num_seqs + 1]: sequence s owns rows [query_start[s], query_start[s+1]) */
  const int32_t* context_lens;    /* [num_seqs]: KV length after this step, new tokens included */
  const int32_t* slot_mapping;    /* [num_tokens]: physical slot for each new token's K/V */
  const int32_t* block_tables;    /* [num_seqs, max_blocks_per_seq]: first slot of each block */
  uint32_t max_blocks_per_seq;
  uint32_t block_size;            /* tokens per block table entry */
  llmk_kv_layer kv;
} llmk_attention_args;

typedef struct llmk_attention_api {
  uint32_t api_version;  /* LLMK_ATTENTION_API_VERSION */
  uint32_t struct_size;
  /* 1 when the plugin can serve desc; else 0 with the reason written to why. */
  int (*supports)(const llmk_attention_desc* desc, char* why, size_t why_len);
  void* (*create)(const llmk_attention_desc* desc, llmk_error* err);
  void (*destroy)(void* self);
  int (*forward)(void* self, const llmk_attention_args* args, llmk_error* err);
} llmk_attention_api;

#ifdef __cplusplus
}
#endif

#endif /* LLMK_ATTENTION_H */
