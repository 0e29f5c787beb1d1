// Element types of the arrays the CUDA kernels read and write. Numbered as
// the plugin ABI's llmk_dtype (plugins/api/llmk_plugin.h), so a plugin or the
// executor converts a desc's dtype with a cast; kernels/ include no plugin
// header.
#pragma once

#include <cstdint>

namespace llmk::cuda {

enum class DType : uint32_t {
  f32 = 0,
  f16 = 1,
  bf16 = 2,
  i8 = 3,  // group-quantized KV cache only (with f32 scales)
};

}  // namespace llmk::cuda
