#include "ipc/http_poll.hpp"

#include <algorithm>

namespace llmk::ipc {

void PollStore::add(const std::string& id, const std::string& key_name) {
  std::lock_guard lock(mutex_);
  Entry& entry = entries_[id];
  entry.key_name = key_name;
  entry.touched = Clock::now();
}

void PollStore::append(const std::string& id, std::vector<std::string> payloads, bool done,
                       const std::optional<ErrorReply>& error) {
  {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.done) return;
    Entry& entry = it->second;
    if (error && entry.payloads.empty()) entry.first_error = error;
    for (auto& p : payloads) entry.payloads.push_back(std::move(p));
    if (done) {
      entry.done = true;
      entry.touched = Clock::now();
    }
  }
  changed_.notify_all();
}

std::optional<PollStore::Batch> PollStore::fetch(const std::string& id, const std::string& key_name, size_t from,
                                                 std::chrono::milliseconds wait) {
  std::unique_lock lock(mutex_);
  const auto deadline = Clock::now() + wait;
  for (;;) {
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.key_name != key_name) return std::nullopt;
    Entry& entry = it->second;
    if (!entry.done) entry.touched = Clock::now();
    if (entry.payloads.size() > from || entry.done || closed_ || Clock::now() >= deadline) {
      Batch batch;
      for (size_t i = from; i < entry.payloads.size(); ++i) batch.payloads.push_back(entry.payloads[i]);
      batch.next = std::max(from, entry.payloads.size());
      batch.done = entry.done;
      batch.first_error = entry.first_error;
      return batch;
    }
    changed_.wait_until(lock, deadline);
  }
}

PollStore::Erased PollStore::erase(const std::string& id, const std::string& key_name) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.key_name != key_name) return {};
  const Erased erased{true, !it->second.done};
  entries_.erase(it);
  return erased;
}

std::vector<std::string> PollStore::expire(Clock::time_point now) {
  std::lock_guard lock(mutex_);
  std::vector<std::string> abandoned;
  std::vector<std::pair<Clock::time_point, std::string>> finished;
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& entry = it->second;
    const bool stale = now - entry.touched > limits_.keep;
    if (entry.done && stale) {
      it = entries_.erase(it);
      continue;
    }
    if (entry.done) finished.emplace_back(entry.touched, it->first);
    if (!entry.done && stale && !entry.abandoned) {
      entry.abandoned = true;
      abandoned.push_back(it->first);
    }
    ++it;
  }
  if (finished.size() > limits_.max_finished) {
    std::sort(finished.begin(), finished.end());
    for (size_t i = 0; i < finished.size() - limits_.max_finished; ++i) entries_.erase(finished[i].second);
  }
  return abandoned;
}

void PollStore::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  changed_.notify_all();
}

size_t PollStore::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace llmk::ipc
