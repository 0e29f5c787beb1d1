#include "core/kv_event_log.hpp"

#include <spdlog/spdlog.h>

namespace llmk {

void KvEventLog::sink(void* ctx, const llmk_kv_event* event) noexcept {
  if (ctx == nullptr || event == nullptr) return;
  if (event->type < LLMK_KV_EVENT_BLOCK_STORED || event->type > LLMK_KV_EVENT_ALL_BLOCKS_CLEARED) return;
  try {
    KvEvent e;
    e.type = static_cast<llmk_kv_event_type>(event->type);
    e.block_hash = event->block_hash;
    if (event->type == LLMK_KV_EVENT_BLOCK_STORED) {
      if (event->has_parent) e.parent_block_hash = event->parent_block_hash;
      if (event->token_ids != nullptr) e.token_ids.assign(event->token_ids, event->token_ids + event->num_tokens);
    }
    static_cast<KvEventLog*>(ctx)->append(std::move(e));
  } catch (...) {
    // Out of memory inside a plugin call: the event is lost, the call goes on.
  }
}

void KvEventLog::append(KvEvent event) {
  bool first_drop = false;
  bool was_empty = false;
  {
    std::lock_guard lock(mutex_);
    if (pending_.size() >= max_events_) {
      first_drop = num_dropped_++ == 0;
    } else {
      was_empty = pending_.empty();
      pending_.push_back(std::move(event));
      ++num_appended_;
    }
  }
  if (first_drop) {
    spdlog::warn("kv_events: {} events wait unpublished (kv_events.max_queue_events); dropping events, so "
                 "subscribers' block sets are stale from now on",
                 max_events_);
  }
  if (was_empty) ready_.notify_one();  // the taker waits only on an empty log
}

std::vector<KvEvent> KvEventLog::take(std::chrono::milliseconds wait) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, wait, [&] { return !pending_.empty() || woken_; });
  woken_ = false;
  std::vector<KvEvent> out;
  out.swap(pending_);
  return out;
}

void KvEventLog::wake() {
  {
    std::lock_guard lock(mutex_);
    woken_ = true;
  }
  ready_.notify_one();
}

uint64_t KvEventLog::num_appended() const {
  std::lock_guard lock(mutex_);
  return num_appended_;
}

uint64_t KvEventLog::num_dropped() const {
  std::lock_guard lock(mutex_);
  return num_dropped_;
}

}  // namespace llmk
