// Where a CPU forward's wall time goes, by kind of operation: the model adds
// each operation's time (as seen by the thread that runs the forward, so a
// linear layer's time includes its parallel region's start and barrier) to
// the matching sum. For benchmarks and profiling; off unless asked for.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace llmk {

enum class ForwardOp : uint8_t {
  qkv,         // the fused q/k/v linear (and its biases)
  rope_cache,  // rotary embedding, key rotation, the V copy
  attention,   // the attention plugin's run (the K/V write included)
  o_proj,
  gate_up,     // the fused gate/up linear
  down,
  lm_head,
  other,       // embedding, norms, residual adds, silu * up, the logits rows' gather
  count
};

struct ForwardTimings {
  static constexpr size_t kOps = static_cast<size_t>(ForwardOp::count);
  std::array<double, kOps> seconds{};  // summed over forwards since the last clear()
  uint64_t forwards = 0;

  double total() const {
    double t = 0.0;
    for (double s : seconds) t += s;
    return t;
  }
  void clear() { *this = ForwardTimings{}; }
  static const char* name(ForwardOp op) {
    static constexpr const char* kNames[kOps] = {"qkv",     "rope+cache", "attention", "o_proj",
                                                 "gate_up", "down",       "lm_head",   "other"};
    return kNames[static_cast<size_t>(op)];
  }
};

// Lap timer over one forward: lap(op) adds the time since the previous lap
// (or since construction) to op's sum. Does nothing without timings.
class ForwardLaps {
 public:
  explicit ForwardLaps(ForwardTimings* timings) : timings_(timings) {
    if (timings_ == nullptr) return;
    ++timings_->forwards;
    last_ = std::chrono::steady_clock::now();
  }
  void lap(ForwardOp op) {
    if (timings_ == nullptr) return;
    const auto now = std::chrono::steady_clock::now();
    timings_->seconds[static_cast<size_t>(op)] += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }

 private:
  ForwardTimings* timings_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace llmk
