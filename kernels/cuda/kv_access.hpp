// Device-side access to one layer's KV cache in the standard layout
// (plugins/api/llmk_attention.h), for every cache dtype the CUDA attention
// kernels serve: F32, F16, BF16, and I8 group-quantized.
//
// Element i of an array is element i of the flattened
// [num_slots][num_kv_heads][head_dim] cache. For I8, value = int8 * scale with
// scales [num_slots][num_kv_heads][head_dim / group_size]; a group never
// straddles two heads (group_size divides head_dim), so the scale of element i
// is scales[i / group_size].
//
// Kernels are templated on a reader or writer type (KvRead<C>, KvWrite<C>),
// so the dtype is resolved once per launch (with_kv_type) and the inner
// loops hold no switch. Header-only, device inline.
#pragma once

#include <cstdint>

#include "cuda_compat.hpp"
#include "device_common.hpp"

namespace llmk::cuda::device {

// Reads one array (K or V) of a cache of element type C (float, __half,
// __nv_bfloat16, or int8_t for the group-quantized cache).
template <class C>
struct KvRead {
  const C* data;
  __device__ __forceinline__ float at(int64_t i) const { return to_float(data[i]); }
};

template <>
struct KvRead<int8_t> {
  const int8_t* data;
  const float* scales;
  int32_t group_size;
  __device__ __forceinline__ float at(int64_t i) const {
    return static_cast<float>(data[i]) * scales[i / group_size];
  }
};

// Writes rows into one array (K or V).
template <class C>
struct KvWrite {
  C* data;
  __device__ __forceinline__ void put(int64_t i, float x) const { data[i] = from_float<C>(x); }
};

template <>
struct KvWrite<int8_t> {
  int8_t* data;
  float* scales;
  int32_t group_size;
};

// Symmetric int8 quantization of one group, as the CPU engine's
// kernels/cpu/kv_quant: scale = amax / 127, q = clamp(nearbyint(x * 127 / amax), -127, 127);
// an all-zero group has scale 0 and stores zeros.
__device__ __forceinline__ int8_t quantize_i8(float x, float inv_scale) {
  return static_cast<int8_t>(fminf(fmaxf(rintf(x * inv_scale), -127.0f), 127.0f));
}

__device__ __forceinline__ float i8_inverse_scale(float amax) { return amax > 0.0f ? 127.0f / amax : 0.0f; }

}  // namespace llmk::cuda::device
