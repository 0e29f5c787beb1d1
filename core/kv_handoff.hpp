// Prefill/decode disaggregation: a prefill replica computes a prompt's K/V
// and its first token, and hands both to a decode replica, which restores
// the K/V (as it restores an offloaded sequence) and decodes from there.
//
// KvHandoff is what travels; KvHandoffBox is where a prefill replica's
// scheduler leaves it, keyed by the router's bootstrap room, until the decode
// replica fetches it (ipc/kv_transfer.hpp carries it between processes).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace llmk {

// A prompt's K/V as the prefill replica's executor saved it: one buffer per
// allocator block of positions (KvOffloader::save_kv of that block's slots),
// blocks[0] holding positions [0, block_size).
struct KvHandoff {
  // The saving replica's KV layout (model shape, KV dtype, block size,
  // tensor degree): a replica restores only a handoff of its own layout.
  std::string layout;
  std::vector<int32_t> prompt_tokens;
  int32_t first_token = -1;  // sampled from the prompt's last row
  int32_t block_size = 0;
  std::vector<std::vector<uint8_t>> blocks;

  size_t num_bytes() const;
};

// The outcome of one prefill: the handoff, or why there is none (the
// prefill failed, was cancelled, or ended at its first token).
struct KvHandoffResult {
  std::shared_ptr<KvHandoff> handoff;  // null when error is set
  std::string error;
};

// Thread-safe. The scheduler puts; a transfer server takes. An entry nobody
// takes within `ttl` is dropped (the decode replica gave up or never came),
// and beyond `capacity` entries the oldest is dropped first.
class KvHandoffBox {
 public:
  KvHandoffBox(std::string layout, size_t capacity, std::chrono::milliseconds ttl);
  KvHandoffBox(const KvHandoffBox&) = delete;
  KvHandoffBox& operator=(const KvHandoffBox&) = delete;

  const std::string& layout() const { return layout_; }
  void put(const std::string& key, KvHandoff handoff);
  void fail(const std::string& key, std::string error);
  // The entry for key, removed; nullopt while there is none.
  std::optional<KvHandoffResult> take(const std::string& key);
  size_t size() const;
  uint64_t num_dropped() const;

 private:
  void insert(const std::string& key, KvHandoffResult result);

  struct Entry {
    KvHandoffResult result;
    std::chrono::steady_clock::time_point stored;
  };
  const std::string layout_;
  const size_t capacity_;
  const std::chrono::milliseconds ttl_;
  mutable std::mutex mutex_;
  std::map<std::string, Entry> entries_;
  std::deque<std::string> order_;  // keys, oldest first (may name taken ones)
  uint64_t num_dropped_ = 0;
};

}  // namespace llmk
