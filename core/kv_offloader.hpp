// Offload-style preemption: the scheduler saves a preempted sequence's K/V to
// host memory and writes it back when the sequence resumes, instead of
// recomputing it. Every Executor (core/executor.hpp) is one, over the KV
// memory it owns; tests use fakes.
//
// Calls happen inside Scheduler::schedule(), when no forward is running and
// before the step's kv_copies are applied; the scheduler only restores in a
// step that has no pending kv_copies (a copy's source could otherwise be the
// slot being restored).
#pragma once

#include <cstdint>
#include <vector>

namespace llmk {

class KvOffloader {
 public:
  virtual ~KvOffloader() = default;
  // All layers' K/V of the given physical slots, in an opaque buffer.
  virtual std::vector<uint8_t> save_kv(const std::vector<int32_t>& slots) = 0;
  // Writes a buffer from save_kv (same number of slots) to other slots.
  virtual void restore_kv(const std::vector<int32_t>& slots, const std::vector<uint8_t>& data) = 0;
};

}  // namespace llmk
