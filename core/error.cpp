#include "core/error.hpp"

namespace llmk {

const char* to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::invalid_config: return "invalid_config";
    case ErrorCode::bad_checkpoint: return "bad_checkpoint";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::plugin: return "plugin";
    case ErrorCode::not_found: return "not_found";
    case ErrorCode::overloaded: return "overloaded";
    case ErrorCode::cancelled: return "cancelled";
    case ErrorCode::peer_lost: return "peer_lost";
    case ErrorCode::internal: return "internal";
    case ErrorCode::deadline_exceeded: return "deadline_exceeded";
  }
  return "unknown";
}

}  // namespace llmk
