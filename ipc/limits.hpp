// Admission limits of the front ends: per-key concurrency and tokens per
// minute (KeyLimiter), and request deadlines (Deadlines), which cancel a
// request through Backend::cancel once its time is up.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "ipc/auth.hpp"
#include "ipc/backend.hpp"

namespace llmk::ipc {

using LimitClock = std::chrono::steady_clock;

// Plain bookkeeping, no threads: the caller passes the time.
class KeyLimiter {
 public:
  explicit KeyLimiter(AuthOptions options) : options_(std::move(options)) {}

  struct Refusal {
    std::string reason;    // max_concurrent | tokens_per_minute
    std::string message;   // names the key and the limit
    int retry_after_s = 1; // when a retry may pass (whole seconds, >= 1)
  };
  // Takes one of the key's concurrency slots, or says which limit refuses.
  std::optional<Refusal> try_acquire(const std::string& key_name, LimitClock::time_point now);
  void release(const std::string& key_name);
  // Tokens a request of the key used (prompt and completion), counted in
  // its tokens-per-minute window from `now`.
  void add_tokens(const std::string& key_name, uint64_t num_tokens, LimitClock::time_point now);
  uint32_t num_live(const std::string& key_name) const;

 private:
  struct KeyState {
    uint32_t num_live = 0;
    std::deque<std::pair<LimitClock::time_point, uint64_t>> window;  // (when, tokens), oldest first
    uint64_t window_tokens = 0;
  };
  void expire(KeyState& state, LimitClock::time_point now);

  const AuthOptions options_;
  mutable std::mutex mutex_;
  std::map<std::string, KeyState> keys_;
};

// One thread that cancels requests whose deadline passed. watch() wraps a
// request's callback: when the deadline cancels the request, its final
// events (finish_reason cancelled) arrive as errors with code
// deadline_exceeded instead, naming the deadline.
class Deadlines {
 public:
  explicit Deadlines(Backend& backend);
  ~Deadlines();  // joins the thread; pending deadlines are dropped
  Deadlines(const Deadlines&) = delete;
  Deadlines& operator=(const Deadlines&) = delete;

  // timeout_s <= 0: no deadline (the callback is returned unchanged).
  // request_id must be the id the backend knows the request by.
  Backend::EventCallback watch(const std::string& request_id, double timeout_s, Backend::EventCallback on_event);
  size_t num_armed() const;

 private:
  struct Armed;
  void run();

  Backend& backend_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::multimap<LimitClock::time_point, std::shared_ptr<Armed>> armed_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace llmk::ipc
