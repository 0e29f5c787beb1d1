// Publishes the KV allocator's prefix-cache events (core/kv_event_log.hpp)
// as vLLM does, so KV-aware routers that read vLLM's stream read ours:
// every message on the PUB socket is three frames
//   [topic] [sequence number: 8 bytes, big-endian] [msgpack batch]
// with the batch [timestamp (float seconds since the epoch), [event, ...]]
// and each event a tagged array:
//   ["BlockStored", [block_hash, ...], parent_block_hash | nil, [token_id, ...], block_size,
//    lora_id (nil), medium (nil)]
//   ["BlockRemoved", [block_hash, ...], medium (nil)]
//   ["AllBlocksCleared"]
// A batch holds what the allocator reported in about 2 ms (vLLM sends one
// per step); consecutive stored blocks of one prefix share one BlockStored,
// consecutive removals one BlockRemoved. The first batch (sequence 0) is
// AllBlocksCleared: a restarted replica holds nothing.
// A replay ROUTER, when configured, answers [empty] [start sequence: 8 bytes
// big-endian] with every kept batch from there as [empty] [sequence]
// [batch], then [empty] [-1 as 8 bytes] [empty]. See docs/kv-events.md.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/config.hpp"
#include "core/kv_event_log.hpp"

namespace llmk::ipc {

// One batch's msgpack payload (exposed for tests).
std::string encode_kv_event_batch(double timestamp, const std::vector<KvEvent>& events);

class KvEventPublisher {
 public:
  // Binds or connects at once: throws Error(invalid_config) naming the key
  // whose endpoint fails.
  explicit KvEventPublisher(const KvEventsSection& config);
  ~KvEventPublisher();  // publishes what the log holds, then stops
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // The log to hand the allocator (its event sink).
  const std::shared_ptr<KvEventLog>& log() const { return log_; }
  std::string endpoint() const { return endpoint_; }                // as bound or connected
  std::string replay_endpoint() const { return replay_endpoint_; }  // as bound; "" when none
  uint64_t num_batches() const { return num_batches_.load(); }      // published so far (the next sequence number)
  uint64_t num_events() const { return num_events_.load(); }        // log events published so far

 private:
  struct Sockets;
  void run();

  const KvEventsSection config_;
  std::shared_ptr<KvEventLog> log_;
  std::unique_ptr<Sockets> sockets_;
  std::string endpoint_;
  std::string replay_endpoint_;
  std::atomic<uint64_t> num_batches_{0};
  std::atomic<uint64_t> num_events_{0};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace llmk::ipc
