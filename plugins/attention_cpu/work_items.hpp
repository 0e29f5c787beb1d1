// attention.cpu's plan: the work items plan() makes and run() spreads over
// threads, and each thread's scratch, carved from the caller's workspace.
#pragma once

#include <cstddef>
#include <cstdint>

#include "plugins/attention_cpu/attend_decode.hpp"
#include "plugins/attention_cpu/attend_tile.hpp"

namespace llmk::attention_cpu {

constexpr int kChunk = kTileKeys;   // keys per online-softmax step
constexpr int kTileMinRows = 4;     // from this many query rows on, the register-tiled kernel
constexpr int kRowsPerItem = 64;    // query rows (tokens x heads of a group) per work item
constexpr size_t kAlign = 64;       // every scratch array starts on a cache line

// One thread's scratch: arrays carved from its share of the workspace.
struct Scratch {
  const float** q_rows;
  float** out_rows;
  const float** k_rows;
  const float** v_rows;
  int64_t* low_key;   // per query row: visible keys [low_key, last_key]
  int64_t* last_key;
  float *scores, *m, *l, *acc, *alpha;
  float* k_t;           // tiled kernel: [head_dim, kTileKeys]; null when the head size has no tiled kernel
  float *k_buf, *v_buf; // converted caches (F16, I8): [kChunk, head_dim]; null for F32
  DecodeScratch decode;
};

// Hands out 64-byte-aligned arrays from one region; with a null base it only
// measures (every pointer stays null and offset() is the size needed).
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<unsigned char*>(base)) {}
  template <class T>
  T* take(size_t count) {
    if (count == 0) return nullptr;
    T* at = base_ ? reinterpret_cast<T*>(base_ + offset_) : nullptr;
    offset_ += (count * sizeof(T) + kAlign - 1) / kAlign * kAlign;
    return at;
  }
  size_t offset() const { return offset_; }

 private:
  unsigned char* base_;
  size_t offset_ = 0;
};

struct WorkItem {
  uint32_t seq;
  uint32_t kv_head;
  int32_t first_token;  // batch row of the item's first query token
  int32_t num_tokens;
  uint32_t kv_head_end = 0;  // decode items: KV heads [kv_head, kv_head_end); 0 otherwise
  // Decode items: positions [pos_begin, pos_end), the whole visible context
  // (span < 0: straight to the output) or one span of it (attend_decode.hpp),
  // whose state goes to float offset `span` of the partials area.
  int64_t pos_begin = 0, pos_end = 0;
  int64_t span = -1;
  bool sinks = false;  // decode items: positions below sink_tokens, scored with q_sink
  bool tree = false;   // rows of a token tree's sequence (API 3.3): each sees its ancestors
};

// A decode whose spans are merged after the items: the token's batch row and
// its first span state (num_spans consecutive ones).
struct SpanMerge {
  int32_t row;
  int32_t num_spans;
  int64_t first_span;
};

}  // namespace llmk::attention_cpu
