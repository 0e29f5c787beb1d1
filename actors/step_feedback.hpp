// StepFeedback: how step t's sampled ids reach step t+1's forward when the
// scheduler plans t+1 before they are back (scheduler.overlap).
//
//   executor: execute(t) ──▶ sampler: sample(t) ─publish(t)─┐
//   executor: wait(t) ◀─────────────────────────────────────┘ then execute(t+1)
//
// The executor actor waits for the previous step's ids before every forward,
// whether the step feeds any back or not: that is also what keeps a logits
// view unchanged until the sampler has taken it (core/executor.hpp). The
// sampler publishes as soon as the ids are where the executor can read them
// in order: host ids once sampled on the CPU; for a device sampler, once its
// kernels are enqueued (the ids are device memory, an event marks them
// ready), so the device runs step t+1 while the host copies step t's ids
// back. A step whose forward or sampling fails is published as failed.
//
// One slot: the sampler sees step t+1 only after the executor has run it, so
// it never publishes t+1 while step t's ids are still being read.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/executor.hpp"

namespace llmk {

class StepFeedback {
 public:
  // Sampler: step `step`'s ids are where `ids` says (host ids are copied).
  void publish(uint64_t step, const SampledIds& ids);
  // Executor or sampler: step `step` sampled nothing.
  void fail(uint64_t step);
  // Executor: waits until `step` is published or failed. The ids stay valid
  // until the next publish. Throws Error(internal) after `timeout`,
  // Error(cancelled) once closed.
  SampledIds wait(uint64_t step, std::chrono::milliseconds timeout);
  // Wakes every waiter for good (the engine is stopping).
  void close();

 private:
  std::mutex mutex_;
  std::condition_variable published_;
  uint64_t step_ = 0;  // the last step published or failed
  std::atomic<uint64_t> ready_{0};  // step_, readable without the lock (a waiter's spin)
  SampledIds ids_;
  std::vector<int32_t> host_ids_;
  bool closed_ = false;
};

}  // namespace llmk
