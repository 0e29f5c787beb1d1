// Host-side dispatch from a runtime dtype to the element types a kernel
// template is instantiated for, shared by the attention launchers: each
// launcher resolves its dtypes once, and the kernels' inner loops hold no
// switch.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda_compat.hpp"
#include "kv_access.hpp"
#include "dtype.hpp"

namespace llmk::cuda {

template <class T>
struct type_tag {
  using type = T;
};

// Calls f(type_tag<T>{}) for the element type named by dtype: float,
// __half, __nv_bfloat16 for F32, F16, BF16; cudaErrorInvalidValue for others.
template <class F>
cudaError_t with_element_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f(type_tag<float>{});
    case DType::f16:
      return f(type_tag<__half>{});
    case DType::bf16:
      return f(type_tag<__nv_bfloat16>{});
    default:
      return cudaErrorInvalidValue;
  }
}

// The same for a cache dtype, which may also be I8 (int8_t).
template <class F>
cudaError_t with_kv_type(DType dtype, F&& f) {
  if (dtype == DType::i8) return f(type_tag<int8_t>{});
  return with_element_type(dtype, f);
}

// The reader of one cache array (K or V) of element type C; scales and
// group_size are read for I8 only.
template <class C>
device::KvRead<C> kv_reader(const void* data, const float* scales, int32_t group_size) {
  if constexpr (std::is_same_v<C, int8_t>)
    return {static_cast<const int8_t*>(data), scales, group_size};
  else
    return {static_cast<const C*>(data)};
}

}  // namespace llmk::cuda
