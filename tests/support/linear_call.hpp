// Calling a linear plugin's C table directly, as LinearImpl does: the
// workspace the layer asks for, 64-byte aligned, then the forward.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/aligned_buffer.hpp"
#include "plugins/api/llmk_linear.h"

namespace llmk::test {

// Returns the plugin's status; err is filled on failure.
inline int linear_forward(const llmk_linear_api& api, void* self, const float* x, float* y, uint32_t num_rows,
                          llmk_error* err) {
  size_t bytes = 0;
  if (const int status = api.workspace_bytes(self, num_rows, &bytes, err); status != LLMK_OK) return status;
  const ::llmk::AlignedBuffer workspace(bytes, "a test workspace");
  return api.forward(self, x, y, num_rows, workspace.data(), workspace.bytes(), /*stream=*/nullptr, err);
}

// 0 when the plugin fails to say.
inline size_t linear_weight_bytes(const llmk_linear_api& api, const void* self) {
  llmk_error err{};
  size_t bytes = 0;
  return api.weight_bytes(self, &bytes, &err) == LLMK_OK ? bytes : 0;
}

}  // namespace llmk::test
