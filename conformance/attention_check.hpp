// One attention step through any attention plugin's C table, checked
// against a float64 reference: random paged block tables, mixed prefill
// chunks and decodes, F32, F16, BF16 and I8 caches, on the host or a device
// (device.hpp). Used by the attention conformance suite and the attention.cpu
// tests.
//
// The reference is softmax(q k^T * scale) v in double over what the cache
// holds after the step (only the last `sliding_window` positions up to the
// query's own when the problem sets a window, and the first `sink_tokens`
// scored with the step's q_sink rows; of a token tree's new tokens only the
// query's ancestors and itself; dequantized for I8, widened for
// F16 and BF16), so it checks the plugin's arithmetic exactly up to F32
// rounding; what the plugin wrote for the new tokens is checked separately
// against the inputs, within the rounding its cache type allows (half a unit
// in the last place for F16 and BF16, half a step for I8).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "conformance/device.hpp"
#include "plugins/api/llmk_attention.h"

namespace llmk::conformance {

struct AttentionProblem {
  uint32_t num_heads, num_kv_heads, head_dim;
  uint32_t block_size;
  std::vector<int32_t> new_tokens;  // per sequence
  std::vector<int32_t> context;     // per sequence, after the step
  uint32_t sliding_window = 0;      // 0: whole context; else a query at p sees (p - window, p]
  // API 3.2: positions [0, sink_tokens) are visible to every later query
  // (whatever the window) and scored with q_sink rows of their own.
  uint32_t sink_tokens = 0;
  // API 3.3: per sequence, its new tokens' tree parents (index among its new
  // tokens, -1 for the cached context; empty: causal). A token sees the
  // cached positions and its ancestors among the new tokens; its depth
  // places it in the text for the window. Sent only when some sequence has
  // one.
  std::vector<std::vector<int32_t>> tree_parents{};
};

struct AttentionOutcome {
  bool supported = true;   // false: supports() refused (why says why)
  std::string why;         // refusal reason, or the first failure
  double max_err = 0;      // largest |out - reference|; +inf for a missing or non-finite output, or a broken contract
  bool cache_ok = true;    // the new tokens' K/V were stored within the cache type's rounding
  std::vector<float> out;  // the new tokens' outputs, [new tokens, num_heads, head_dim], batch order
};

// IEEE binary16 bits to a double (normal, subnormal, zero; no NaN/inf here).
double half_bits_to_double(uint16_t h);

// Writes the cached positions with one step, then runs the new tokens in a
// second step and compares. A sequence's K/V and queries depend only on
// (seed, its index), not on the others, so the same sequence at the same
// index in two problems meets the same numbers. kv_dtype: LLMK_DTYPE_F32,
// F16, BF16 or I8 (i8_group values per scale). Activations are F32, in
// `device`'s memory (the host when it is null). Where the table has a
// workspace_bound (API 3.1), no plan() may ask for more.
AttentionOutcome check_attention_step(const llmk_attention_api& api, const AttentionProblem& p, uint32_t kv_dtype,
                                      uint32_t num_threads, uint64_t seed, uint32_t i8_group = 8,
                                      Device* device = nullptr);

}  // namespace llmk::conformance
