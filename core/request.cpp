#include "core/request.hpp"

namespace llmk {

const char* to_string(FinishReason r) noexcept {
  switch (r) {
    case FinishReason::none: return "none";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
  }
  return "unknown";
}

}  // namespace llmk
