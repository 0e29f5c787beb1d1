/* llmk linear plugin API (kind LLMK_PLUGIN_LINEAR): y = x W^T.
 *
 * This is where quantization plugs in: create() receives the checkpoint's
 * weight once at load and may convert, quantize or repack it into storage it
 * owns; forward() multiplies float activations by it. The host may fuse
 * projections that share an input (q/k/v, gate/up) into one weight before
 * create(); name then says so ("model.layers.3.self_attn.qkv_proj").
 *
 * Scratch memory belongs to the host: a layer says how many bytes a forward
 * of num_rows rows needs (workspace_bytes) and forward() receives them, so
 * layers share one buffer, nothing allocates per call and no plugin keeps
 * global scratch behind a lock.
 *
 * Devices: x, y and the workspace live on desc.device, in
 * desc.activation_dtype. forward() receives the host's queue for that
 * device: NULL on the CPU (the plugin's threads are its own), the
 * cudaStream_t of the executor on CUDA, where forward() only enqueues work
 * (it must not synchronize, and must be capturable into a CUDA graph). */
#ifndef LLMK_LINEAR_H
#define LLMK_LINEAR_H

#include "llmk_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Majors (each broke compatibility):
 * 2: the desc names the device and the activation dtype; a caller-owned
 * workspace; every entry point returns a status.
 * 3: forward() takes activations in the desc's dtype (void pointers) and the
 * device queue.
 * Minors (see llmk_plugin.h for how minors grow):
 * 3.1: weight_dtype may name ggml blocks (LLMK_DTYPE_GGML_*, a GGUF file's
 * quantized tensors as stored). The host offers them only to plugins built
 * against 3.1 or later; supports() refuses a block type it has no kernel
 * for, and the host then dequantizes that weight to F32 for it.
 * 3.2: weight_dtype may be LLMK_DTYPE_INT4_GROUPS or LLMK_DTYPE_INT8_GROUPS
 * (weight points at an llmk_linear_int_groups: integers already quantized,
 * a GPTQ or AWQ checkpoint's). Offered only to plugins built against 3.2 or
 * later, with the same fallback as ggml blocks. */
#define LLMK_LINEAR_API_MAJOR 3u
#define LLMK_LINEAR_API_MINOR 2u
#ifndef LLMK_LINEAR_API_BUILD_MINOR
#define LLMK_LINEAR_API_BUILD_MINOR LLMK_LINEAR_API_MINOR
#endif
#define LLMK_LINEAR_API_VERSION LLMK_API_VERSION(LLMK_LINEAR_API_MAJOR, LLMK_LINEAR_API_BUILD_MINOR)

typedef struct llmk_linear_desc {
  uint32_t struct_size;
  const char* name;          /* layer name, for errors and per-layer options */
  uint32_t in_features;
  uint32_t out_features;
  uint32_t weight_dtype;     /* llmk_dtype of weight: F32, F16, BF16, or (3.1) ggml blocks */
  const void* weight;        /* [out_features, in_features], row-major (rows of blocks for ggml types) */
  int weight_outlives;       /* nonzero: weight stays valid until destroy (the plugin may borrow it) */
  uint32_t max_rows;         /* most rows (tokens) one forward will pass */
  uint32_t num_threads;
  const char* options;       /* JSON object of plugin options from config, "{}" when none */
  uint32_t device;           /* llmk_device of x, y and the workspace */
  uint32_t activation_dtype; /* llmk_dtype of x and y: F32 on the CPU; F32, F16 or BF16 where the plugin takes them
                                (linear.cublas); a plugin refuses a dtype it cannot serve */
} llmk_linear_desc;

/* Weight dtypes of 3.2 (beside llmk_plugin.h's llmk_dtype values): integers
 * quantized in groups with scales and zero points, as GPTQ and AWQ
 * checkpoints store them; the weight is an llmk_linear_int_groups. */
#define LLMK_DTYPE_INT4_GROUPS 0x40u
#define LLMK_DTYPE_INT8_GROUPS 0x41u

/* A weight quantized in groups along in_features (3.2):
 *   w[n, order(k)] = scales[n, k / group_size] * (q[n, k] - zeros[n, k / group_size])
 * with order(k) = input_order[k], or k when input_order is NULL (a GPTQ
 * checkpoint quantized in act-order stores its columns permuted: the plugin
 * gathers x by input_order). Everything is borrowed for the duration of
 * create() (longer with weight_outlives). */
typedef struct llmk_linear_int_groups {
  uint32_t bits;                /* 4 (LLMK_DTYPE_INT4_GROUPS) or 8 (LLMK_DTYPE_INT8_GROUPS) */
  uint32_t group_size;          /* inputs per group; divides in_features */
  uint32_t out_features;
  uint32_t in_features;
  const uint8_t* q;             /* [out, in] unsigned, rows of in * bits / 8 bytes; 4 bits: low nibble first */
  const float* scales;          /* [out, in / group_size] */
  const uint8_t* zeros;         /* [out, in / group_size], 0 .. 2^bits - 1 */
  const uint32_t* input_order;  /* NULL, or [in]: a permutation of 0 .. in - 1 */
} llmk_linear_int_groups;

typedef struct llmk_linear_api {
  uint32_t api_version;  /* LLMK_LINEAR_API_VERSION */
  uint32_t struct_size;
  int (*supports)(const llmk_linear_desc* desc, char* why, size_t why_len);
  void* (*create)(const llmk_linear_desc* desc, llmk_error* err);
  void (*destroy)(void* self);
  /* Scratch bytes one forward of num_rows (1..max_rows) rows needs; never
   * more for fewer rows. */
  int (*workspace_bytes)(const void* self, uint32_t num_rows, size_t* bytes, llmk_error* err);
  /* x: [num_rows, in_features], y: [num_rows, out_features] (overwritten).
   * workspace: 64-byte aligned, at least workspace_bytes(num_rows) bytes,
   * the plugin's only for this call (the host reuses it for other layers). */
  int (*forward)(void* self, const void* x, void* y, uint32_t num_rows, void* workspace,
                 size_t workspace_size, void* stream, llmk_error* err);
  /* Bytes this layer's weights occupy in the plugin's own format. */
  int (*weight_bytes)(const void* self, size_t* bytes, llmk_error* err);
} llmk_linear_api;

#ifdef __cplusplus
}
#endif

#endif /* LLMK_LINEAR_H */
