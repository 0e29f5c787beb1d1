// The KV allocator's prefix-cache events between the step loop and a
// publisher thread: the allocator's event sink (API 2.1) appends, a
// publisher takes them in order. Appending never waits on the taker beyond
// a short lock; when max_events wait already, the event is dropped and
// counted (a subscriber's block set is stale from then on; the log says so).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "plugins/api/llmk_kv_allocator.h"

namespace llmk {

struct KvEvent {
  llmk_kv_event_type type = LLMK_KV_EVENT_BLOCK_STORED;
  uint64_t block_hash = 0;                 // stored, removed
  std::optional<uint64_t> parent_block_hash;  // stored: nullopt for a prompt's first block
  std::vector<int32_t> token_ids;          // stored: [block size]
  bool operator==(const KvEvent&) const = default;
};

class KvEventLog {
 public:
  explicit KvEventLog(size_t max_events) : max_events_(max_events) {}
  KvEventLog(const KvEventLog&) = delete;
  KvEventLog& operator=(const KvEventLog&) = delete;

  // For llmk_kv_allocator_desc: event_sink = KvEventLog::sink, event_sink_ctx = this.
  static void sink(void* ctx, const llmk_kv_event* event) noexcept;
  void append(KvEvent event);
  // Everything appended since the last take, in order; waits up to `wait`
  // for the first one (returns empty on timeout or after wake()).
  std::vector<KvEvent> take(std::chrono::milliseconds wait);
  void wake();  // ends a take() waiting now
  uint64_t num_appended() const;
  uint64_t num_dropped() const;

 private:
  const size_t max_events_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<KvEvent> pending_;
  uint64_t num_appended_ = 0;
  uint64_t num_dropped_ = 0;
  bool woken_ = false;
};

}  // namespace llmk
