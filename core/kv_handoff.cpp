#include "core/kv_handoff.hpp"

namespace llmk {

size_t KvHandoff::num_bytes() const {
  size_t n = 0;
  for (const auto& b : blocks) n += b.size();
  return n;
}

KvHandoffBox::KvHandoffBox(std::string layout, size_t capacity, std::chrono::milliseconds ttl)
    : layout_(std::move(layout)), capacity_(capacity == 0 ? 1 : capacity), ttl_(ttl) {}

void KvHandoffBox::put(const std::string& key, KvHandoff handoff) {
  insert(key, KvHandoffResult{std::make_shared<KvHandoff>(std::move(handoff)), {}});
}

void KvHandoffBox::fail(const std::string& key, std::string error) { insert(key, KvHandoffResult{nullptr, std::move(error)}); }

void KvHandoffBox::insert(const std::string& key, KvHandoffResult result) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  // Expired and surplus entries go first, oldest first.
  while (!order_.empty()) {
    auto it = entries_.find(order_.front());
    if (it == entries_.end()) {
      order_.pop_front();  // taken already
      continue;
    }
    if (now - it->second.stored < ttl_ && entries_.size() < capacity_) break;
    entries_.erase(it);
    order_.pop_front();
    num_dropped_ += 1;
  }
  if (entries_.erase(key) > 0) num_dropped_ += 1;  // a room reused: the newer prefill wins
  entries_.emplace(key, Entry{std::move(result), now});
  order_.push_back(key);
}

std::optional<KvHandoffResult> KvHandoffBox::take(const std::string& key) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  KvHandoffResult out = std::move(it->second.result);
  entries_.erase(it);
  return out;
}

size_t KvHandoffBox::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

uint64_t KvHandoffBox::num_dropped() const {
  std::lock_guard lock(mutex_);
  return num_dropped_;
}

}  // namespace llmk
