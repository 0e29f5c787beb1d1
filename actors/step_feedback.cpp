#include "actors/step_feedback.hpp"

#include <algorithm>
#include <string>
#include <thread>

#include "core/error.hpp"

namespace llmk {

void StepFeedback::publish(uint64_t step, const SampledIds& ids) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    ids_ = ids;
    if (ids.device == Device::cpu && ids.data != nullptr) {
      host_ids_.assign(ids.data, ids.data + ids.count);
      ids_.data = host_ids_.data();
    }
    step_ = step;
    ready_.store(step, std::memory_order_release);
  }
  published_.notify_all();
}

void StepFeedback::fail(uint64_t step) {
  SampledIds failed;
  failed.failed = true;
  publish(step, failed);
}

namespace {

// The sampler usually finishes within 100-200 us of the forward's end. Poll
// (yielding the core to whoever wants it) for up to kPoll before sleeping: a
// thread woken from a condition variable waits for a core, and on a small
// VM that wake took ~100-200 us of a 3 ms int4 step.
void poll(const std::atomic<uint64_t>& counter, uint64_t step) {
  constexpr auto kPoll = std::chrono::microseconds(500);
  const auto poll_until = std::chrono::steady_clock::now() + kPoll;
  while (counter.load(std::memory_order_acquire) < step && std::chrono::steady_clock::now() < poll_until)
    std::this_thread::yield();
}

}  // namespace

std::unique_lock<std::mutex> StepFeedback::await(const std::atomic<uint64_t>& counter, const uint64_t& reached,
                                                 uint64_t step, std::chrono::milliseconds timeout,
                                                 const char* what) {
  poll(counter, step);
  std::unique_lock<std::mutex> lock(mutex_);
  const bool done = published_.wait_for(lock, timeout, [&] { return closed_ || reached >= step; });
  if (closed_) throw Error(ErrorCode::cancelled, "the engine is stopping");
  if (!done)
    throw Error(ErrorCode::internal, std::string("the sampler did not finish ") + what + "step " +
                                         std::to_string(step) + " within " + std::to_string(timeout.count()) + " ms");
  return lock;
}

SampledIds StepFeedback::wait(uint64_t step, std::chrono::milliseconds timeout) {
  const auto lock = await(ready_, step_, step, timeout, "");
  if (step_ != step)  // steps are published in the order they run: a later one here is a bug
    throw Error(ErrorCode::internal, "waiting for the ids of step " + std::to_string(step) + ", but step " +
                                         std::to_string(step_) + " was published");
  return ids_;
}

void StepFeedback::sampled(uint64_t step) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    sampled_ = std::max(sampled_, step);
    sampled_ready_.store(sampled_, std::memory_order_release);
  }
  published_.notify_all();
}

void StepFeedback::wait_sampled(uint64_t step, std::chrono::milliseconds timeout) {
  await(sampled_ready_, sampled_, step, timeout, "reading the logits of ");
}

void StepFeedback::close() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  published_.notify_all();
}

}  // namespace llmk
