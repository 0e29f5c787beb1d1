// StepFeedback: how step t's sampled ids reach step t+1's forward when the
// scheduler plans t+1 before they are back (scheduler.overlap).
//
//   executor: execute(t) ──▶ sampler: sample(t) ─publish(t)─┐
//   executor: wait(t) ◀─────────────────────────────────────┘ then execute(t+1)
//
// The executor actor waits for the previous step's ids before every forward,
// whether the step feeds any back or not. The sampler publishes as soon as
// the ids are where the executor can read them in order: host ids once
// sampled on the CPU; for a device sampler, once its kernels are enqueued
// (the ids are device memory, an event marks them ready), so the device runs
// step t+1 while the host copies step t's ids back. A step whose forward or
// sampling fails is published as failed.
//
// A step whose every row takes the raw logits' argmax (greedy, no penalty:
// chooses_raw_argmax, core/sampler.hpp) on an executor that keeps two views
// (Executor::views_kept) is published by the executor itself, from its own
// argmax of the logits, and step t+1 runs while the sampler samples step t
// (and checks that it picked the same ids):
//
//   executor: execute(t), argmax, publish(t), execute(t+1) ...
//   sampler:                      sample(t), sampled(t)
//
// Whoever publishes, the sampler marks every step sampled() once it no
// longer reads that step's logits; the executor waits for that before a
// forward would overwrite them (step t-1's, for step t+1, with two views;
// with one view the wait for step t's ids already implies it).
//
// One slot: a step's ids are published only after the executor has run it,
// and steps are published in order, so step t+1's ids never replace step
// t's while they are still being read.
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
  // Sampler: it no longer reads step `step`'s logits (sampled or failed).
  void sampled(uint64_t step);
  // Executor: waits until step `step` is sampled(). Throws as wait() does.
  void wait_sampled(uint64_t step, std::chrono::milliseconds timeout);
  // Wakes every waiter for good (the engine is stopping).
  void close();

 private:
  // Polls `counter`, then sleeps until `reached` (guarded by mutex_) is at
  // least `step`; throws Error(cancelled) once closed, Error(internal)
  // naming `what` after the timeout. Returns the lock, held.
  std::unique_lock<std::mutex> await(const std::atomic<uint64_t>& counter, const uint64_t& reached, uint64_t step,
                                     std::chrono::milliseconds timeout, const char* what);

  std::mutex mutex_;
  std::condition_variable published_;
  uint64_t step_ = 0;  // the last step published or failed
  std::atomic<uint64_t> ready_{0};  // step_, readable without the lock (a waiter's spin)
  uint64_t sampled_ = 0;  // the last step sampled()
  std::atomic<uint64_t> sampled_ready_{0};  // sampled_, for the spin
  SampledIds ids_;
  std::vector<int32_t> host_ids_;
  bool closed_ = false;
};

}  // namespace llmk
