#include "ipc/limits.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <sstream>

namespace llmk::ipc {
namespace {

constexpr auto kWindow = std::chrono::seconds(60);

std::string seconds_text(double s) {
  std::ostringstream out;
  out << s;
  return out.str();
}

}  // namespace

void KeyLimiter::expire(KeyState& state, LimitClock::time_point now) {
  while (!state.window.empty() && state.window.front().first + kWindow <= now) {
    state.window_tokens -= state.window.front().second;
    state.window.pop_front();
  }
}

std::optional<KeyLimiter::Refusal> KeyLimiter::try_acquire(const std::string& key_name, LimitClock::time_point now) {
  const KeyLimits& limits = options_.limits_of(key_name);
  std::lock_guard lock(mutex_);
  KeyState& state = keys_[key_name];
  if (limits.max_concurrent > 0 && state.num_live >= limits.max_concurrent) {
    // No estimate of when a live request ends: one second, as for a full queue.
    return Refusal{"max_concurrent",
                   "key '" + key_name + "' has " + std::to_string(state.num_live) +
                       " requests live, its limit (server.auth.limits: max_concurrent = " +
                       std::to_string(limits.max_concurrent) + ")",
                   1};
  }
  expire(state, now);
  if (limits.tokens_per_minute > 0 && state.window_tokens >= limits.tokens_per_minute) {
    // The first moment the window holds fewer tokens than the limit.
    uint64_t remaining = state.window_tokens;
    LimitClock::time_point when = now;
    for (const auto& [at, n] : state.window) {
      remaining -= n;
      when = at + kWindow;
      if (remaining < limits.tokens_per_minute) break;
    }
    const double wait_s = std::chrono::duration<double>(when - now).count();
    return Refusal{"tokens_per_minute",
                   "key '" + key_name + "' used " + std::to_string(state.window_tokens) +
                       " tokens in the last minute, its limit (server.auth.limits: tokens_per_minute = " +
                       std::to_string(limits.tokens_per_minute) + ")",
                   std::max(1, static_cast<int>(std::ceil(wait_s)))};
  }
  ++state.num_live;
  return std::nullopt;
}

void KeyLimiter::release(const std::string& key_name) {
  std::lock_guard lock(mutex_);
  KeyState& state = keys_[key_name];
  if (state.num_live > 0) --state.num_live;
}

void KeyLimiter::add_tokens(const std::string& key_name, uint64_t num_tokens, LimitClock::time_point now) {
  if (num_tokens == 0) return;
  std::lock_guard lock(mutex_);
  KeyState& state = keys_[key_name];
  expire(state, now);
  state.window.emplace_back(now, num_tokens);
  state.window_tokens += num_tokens;
}

uint32_t KeyLimiter::num_live(const std::string& key_name) const {
  std::lock_guard lock(mutex_);
  const auto it = keys_.find(key_name);
  return it == keys_.end() ? 0 : it->second.num_live;
}

struct Deadlines::Armed {
  std::string request_id;
  double timeout_s = 0;
  std::atomic<bool> fired{false};
  std::atomic<bool> done{false};
};

Deadlines::Deadlines(Backend& backend) : backend_(backend), thread_([this] { run(); }) {}

Deadlines::~Deadlines() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

Backend::EventCallback Deadlines::watch(const std::string& request_id, double timeout_s,
                                        Backend::EventCallback on_event) {
  if (!(timeout_s > 0)) return on_event;
  auto armed = std::make_shared<Armed>();
  armed->request_id = request_id;
  armed->timeout_s = timeout_s;
  // Capped at about 30 years: a larger one would overflow the clock.
  const auto at = LimitClock::now() + std::chrono::duration_cast<LimitClock::duration>(
                                          std::chrono::duration<double>(std::min(timeout_s, 1e9)));
  {
    std::lock_guard lock(mutex_);
    armed_.emplace(at, armed);
  }
  wake_.notify_all();
  return [armed, on_event = std::move(on_event)](const RequestEvent& ev) {
    if (ev.request_done) armed->done = true;
    if (ev.finished && ev.finish_reason == FinishReason::cancelled && armed->fired) {
      RequestEvent expired = ev;
      expired.finish_reason = FinishReason::error;
      expired.error_code = ErrorCode::deadline_exceeded;
      expired.error = "the request's deadline of " + seconds_text(armed->timeout_s) +
                      " s passed (field timeout, default server.request_timeout_s); it was cancelled";
      return on_event(expired);
    }
    on_event(ev);
  };
}

size_t Deadlines::num_armed() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& [at, armed] : armed_) n += armed->done ? 0 : 1;
  return n;
}

void Deadlines::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (armed_.empty()) {
      wake_.wait(lock);
      continue;
    }
    const auto next = armed_.begin()->first;
    if (LimitClock::now() < next) {
      wake_.wait_until(lock, next);
      continue;
    }
    std::shared_ptr<Armed> armed = armed_.begin()->second;
    armed_.erase(armed_.begin());
    if (armed->done) continue;
    armed->fired = true;
    lock.unlock();
    backend_.cancel(armed->request_id);  // its final events come back cancelled
    lock.lock();
  }
}

}  // namespace llmk::ipc
