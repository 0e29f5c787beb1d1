/* llmk linear plugin API (kind LLMK_PLUGIN_LINEAR): y = x W^T.
 *
 * This is where quantization plugs in: create() receives the checkpoint's
 * weight once at load and may convert, quantize or repack it into storage it
 * owns; forward() multiplies float activations by it. The host may fuse
 * projections that share an input (q/k/v, gate/up) into one weight before
 * create(); name then says so ("model.layers.3.self_attn.qkv_proj"). */
#ifndef LLMK_LINEAR_H
#define LLMK_LINEAR_H

#include "llmk_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LLMK_LINEAR_API_VERSION 1u

typedef struct llmk_linear_desc {
  uint32_t struct_size;
  const char* name;          /* layer name, for errors and per-layer options */
  uint32_t in_features;
  uint32_t out_features;
  uint32_t weight_dtype;     /* llmk_dtype of weight: F32, F16 or BF16 */
  const void* weight;        /* [out_features, in_features], row-major */
  int weight_outlives;       /* nonzero: weight stays valid until destroy (the plugin may borrow it) */
  uint32_t max_rows;         /* most rows (tokens) one forward will pass */
  uint32_t num_threads;
  const char* options;       /* JSON object of plugin options from config, "{}" when none */
} llmk_linear_desc;

typedef struct llmk_linear_api {
  uint32_t api_version;  /* LLMK_LINEAR_API_VERSION */
  uint32_t struct_size;
  int (*supports)(const llmk_linear_desc* desc, char* why, size_t why_len);
  void* (*create)(const llmk_linear_desc* desc, llmk_error* err);
  void (*destroy)(void* self);
  /* x: [num_rows, in_features] f32, y: [num_rows, out_features] f32 (overwritten). */
  int (*forward)(void* self, const float* x, float* y, uint32_t num_rows, llmk_error* err);
  /* Bytes this layer's weights occupy in the plugin's own format. */
  size_t (*weight_bytes)(const void* self);
} llmk_linear_api;

#ifdef __cplusplus
}
#endif

#endif /* LLMK_LINEAR_H */
