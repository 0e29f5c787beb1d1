/* llmk attention plugin API (kind LLMK_PLUGIN_ATTENTION).
 *
 * A step is planned once (plan) and then run layer by layer (run). One run
 * serves one layer of one step: a flattened batch of sequences with
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

/* Majors (each broke compatibility):
 * 2: llmk_attention_desc gained sliding_window.
 * 3: the desc names the device, the activation dtype and the block size; the
 *    plugin declares its KV layout (kv_layout); forward() became plan() once
 *    per step and run() once per layer, with a caller-owned workspace and the
 *    device queue.
 * Minors of 3 (each appended to llmk_attention_api, see llmk_plugin.h):
 * 3.1: workspace_bound (default when absent: no bound declared).
 * 3.2: attention sinks (StreamingLLM): llmk_attention_desc.sink_tokens and
 *      llmk_attention_layer.q_sink, read only when struct_size covers them.
 *      The host gives a desc with sink_tokens > 0 only to plugins of 3.2 or
 *      later; an older plugin never sees one.
 * 3.3: token trees: llmk_attention_step.tree_parents (and its device copy),
 *      read only when struct_size covers them. The host sends a step with
 *      tree_parents only to plugins of 3.3 or later; with an older one it
 *      verifies chains of drafts instead. The table is 3.2's.
 *
 * A plugin claims 3.3 only by defining LLMK_ATTENTION_API_BUILD_MINOR to 3
 * before including this header: the default stays 3.2, so a plugin that does
 * not read tree_parents is never sent a tree. */
#define LLMK_ATTENTION_API_MAJOR 3u
#define LLMK_ATTENTION_API_MINOR 3u
#ifndef LLMK_ATTENTION_API_BUILD_MINOR
#define LLMK_ATTENTION_API_BUILD_MINOR 2u
#endif
#define LLMK_ATTENTION_API_VERSION LLMK_API_VERSION(LLMK_ATTENTION_API_MAJOR, LLMK_ATTENTION_API_BUILD_MINOR)

typedef struct llmk_attention_desc {
  uint32_t struct_size;
  uint32_t num_heads;
  uint32_t num_kv_heads;   /* divides num_heads */
  uint32_t head_dim;
  float scale;             /* softmax scale, usually 1/sqrt(head_dim) */
  uint32_t kv_dtype;       /* LLMK_DTYPE_F32, F16, BF16, or I8 for the group-quantized cache */
  uint32_t kv_group_size;  /* I8 only: elements of head_dim sharing one scale; divides head_dim */
  uint32_t max_context;    /* longest context a sequence may reach */
  uint32_t max_tokens;     /* most new tokens in one step */
  uint32_t num_threads;    /* CPU plugins: worker threads to use */
  const char* options;     /* JSON object of plugin options from config, "{}" when none */
  uint32_t sliding_window; /* keys visible to a query, itself included; 0 = the whole context */
  uint32_t device;         /* llmk_device of q/k/v/out, the cache, the step's device arrays and the workspace */
  uint32_t activation_dtype; /* q, k, v and out: F32 (the CPU engine), BF16 or F16 */
  uint32_t max_seqs;       /* most sequences in one step */
  uint32_t block_size;     /* the KV allocator's configured tokens per block, a planning hint (0 = unknown);
                              each step names the block size its tables use (llmk_attention_step) */
  /* 3.2: attention sinks. Cache positions [0, sink_tokens) of every
   * sequence are visible to every later query whatever sliding_window says,
   * and are scored with the layer's q_sink row instead of its q row (the
   * host rotates q_sink by the query's position within the cache, q by its
   * position in the text; see llmk_attention_layer). 0: no sinks. */
  uint32_t sink_tokens;
} llmk_attention_desc;

/* How one layer's cache is laid out, declared by the plugin for its desc.
 * Every array is slot-major: slot s owns bytes [s * bytes_per_slot,
 * (s + 1) * bytes_per_slot) of it, so the host can allocate the cache, copy
 * slots (copy-on-write, relocation) and save/restore them (offload
 * preemption) without knowing what the bytes mean.
 *
 * LLMK_KV_LAYOUT_STANDARD is the documented one below (other plugins and the
 * tests may read it); LLMK_KV_LAYOUT_OPAQUE is the plugin's own per-slot
 * format, which only it reads. */
typedef enum llmk_kv_layout_kind {
  LLMK_KV_LAYOUT_STANDARD = 0,
  LLMK_KV_LAYOUT_OPAQUE = 1
} llmk_kv_layout_kind;

typedef struct llmk_kv_layout {
  uint32_t struct_size;
  uint32_t kind;                    /* llmk_kv_layout_kind */
  uint32_t alignment;               /* each array's base address is a multiple of this (a power of two) */
  uint64_t k_bytes_per_slot;        /* one token of one layer */
  uint64_t v_bytes_per_slot;
  uint64_t k_scale_bytes_per_slot;  /* 0: no k_scale array */
  uint64_t v_scale_bytes_per_slot;  /* 0: no v_scale array */
} llmk_kv_layout;

/* One layer's cache. The standard layout: for F32, k and v are
 * float[num_slots][num_kv_heads][head_dim]; for F16 and BF16 the same layout
 * of 16-bit values; for I8, int8_t[num_slots][num_kv_heads][head_dim] with
 * k_scale, v_scale float[num_slots][num_kv_heads][head_dim / kv_group_size]
 * (value = int8 * scale, symmetric). Scales are NULL when the layout has none.
 * A negative slot_mapping entry is a row whose K/V is not stored (padding). */
typedef struct llmk_kv_layer {
  void* k;
  void* v;
  float* k_scale;
  float* v_scale;
  uint32_t num_slots;
} llmk_kv_layer;

/* One step's metadata, the same for every layer. plan() reads the host
 * arrays; run() reads the device ones, which hold the same values in
 * desc.device memory (on the CPU they are the host arrays). Both stay valid
 * and unchanged from plan() until the step's last run(). */
typedef struct llmk_attention_step {
  uint32_t struct_size;
  uint32_t num_tokens;            /* new tokens in this step, all sequences */
  uint32_t num_seqs;
  uint32_t max_blocks_per_seq;
  uint32_t block_size;            /* tokens per block table entry */
  uint32_t num_slots;             /* slots in each layer's cache */
  const int32_t* query_start;     /* [num_seqs + 1]: sequence s owns rows [query_start[s], query_start[s+1]) */
  const int32_t* context_lens;    /* [num_seqs]: KV length after this step, new tokens included */
  const int32_t* slot_mapping;    /* [num_tokens]: physical slot for each new token's K/V */
  const int32_t* block_tables;    /* [num_seqs, max_blocks_per_seq]: first slot of each block */
  const int32_t* device_query_start;
  const int32_t* device_context_lens;
  const int32_t* device_slot_mapping;
  const int32_t* device_block_tables;
  /* 3.3: token trees. NULL: every new token attends causally (it sees the
   * sequence's new tokens before it). Else [num_tokens]: tree_parents[t] is
   * the parent of new token t as an index among its sequence's new tokens
   * (0 for the sequence's first, query_start[s]), smaller than t's own, or
   * -1 for a token whose parent is the last cached position. Token t sees
   * the cached positions (context_lens[s] minus its new tokens) and, of the
   * new tokens, only its ancestors and itself. Its K/V still lives at the
   * next cache position in row order (slot_mapping). Its depth (ancestors
   * among the new tokens) places it in the text: position cached + depth,
   * which the sliding window counts from; a causal chunk is the chain
   * parent = t - 1 (first token -1), where depth and row agree. */
  const int32_t* tree_parents;
  const int32_t* device_tree_parents;
} llmk_attention_step;

/* One layer of the planned step. Activations in desc.activation_dtype on
 * desc.device; q and k have RoPE applied. */
typedef struct llmk_attention_layer {
  uint32_t struct_size;
  const void* q;    /* [num_tokens, num_heads, head_dim] */
  const void* k;    /* [num_tokens, num_kv_heads, head_dim] */
  const void* v;    /* [num_tokens, num_kv_heads, head_dim] */
  void* out;        /* [num_tokens, num_heads, head_dim] */
  llmk_kv_layer kv; /* this layer's cache, laid out as kv_layout() said */
  /* 3.2, with desc.sink_tokens > 0: [num_tokens, num_heads, head_dim], the
   * queries that score keys at cache positions below sink_tokens (q scores
   * the others). NULL: q scores every key. */
  const void* q_sink;
} llmk_attention_layer;

typedef struct llmk_attention_api {
  uint32_t api_version;  /* LLMK_ATTENTION_API_VERSION */
  uint32_t struct_size;
  /* 1 when the plugin can serve desc; else 0 with the reason written to why. */
  int (*supports)(const llmk_attention_desc* desc, char* why, size_t why_len);
  void* (*create)(const llmk_attention_desc* desc, llmk_error* err);
  void (*destroy)(void* self);
  /* The cache layout this instance reads and writes. */
  int (*kv_layout)(const void* self, llmk_kv_layout* layout, llmk_error* err);
  /* Once per step, on the host: checks the step's metadata against the
   * cache, decides the work split and says how many workspace bytes each
   * run() of this step needs. The plan stays in self until the next plan(). */
  int (*plan)(void* self, const llmk_attention_step* step, size_t* workspace_bytes, llmk_error* err);
  /* Once per layer of the planned step: writes the new K/V into the layer's
   * cache at slot_mapping, then the causal attention of every new query.
   * workspace: at least plan()'s bytes, 64-byte aligned, on desc.device, the
   * plugin's only for this call. stream: the device queue (NULL on the CPU;
   * a cudaStream_t on CUDA, where run() only enqueues, never allocates or
   * synchronizes, so a step can be captured into a CUDA graph). */
  int (*run)(void* self, const llmk_attention_layer* layer, void* workspace, size_t workspace_size, void* stream,
             llmk_error* err);
#if LLMK_ATTENTION_API_BUILD_MINOR >= 1
  /* 3.1, optional (NULL: no bound declared, the host sizes the workspace
   * from each plan()). The most workspace bytes plan() asks for on any step
   * within the desc's max_tokens, max_seqs and max_context, so the host can
   * allocate the workspace once when the instance is created. */
  int (*workspace_bound)(const void* self, size_t* workspace_bytes, llmk_error* err);
#endif
} llmk_attention_api;

#ifdef __cplusplus
}
#endif

#endif /* LLMK_ATTENTION_H */
