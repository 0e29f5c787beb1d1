// What a serving engine runs on, built from its configuration in one place:
// the executor of the configured device, the KV allocator plugin over the
// executor's KV slots, and the Scheduler over that allocator. The actors
// only wire these together (actors/engine.cpp); a program that drives the
// scheduler and executor itself builds them the same way.
#pragma once

#include <memory>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/executor.hpp"
#include "core/kv_allocator.hpp"
#include "core/kv_event_log.hpp"
#include "core/kv_handoff.hpp"
#include "core/kv_offloader.hpp"
#include "core/plugin_loader.hpp"
#include "core/scheduler.hpp"

namespace llmk {

// What the scheduler owns: the KV allocator, the Scheduler built over it,
// and (when scheduler.preemption is "offload") the executor as offloader.
struct SchedulerParts {
  std::shared_ptr<KvEventLog> kv_events;  // the allocator's event sink; outlives *kv
  std::shared_ptr<KvHandoffBox> handoffs;  // where a prefill replica's exports go
  std::unique_ptr<KvAllocator> kv;
  std::shared_ptr<KvOffloader> offloader;
  std::unique_ptr<Scheduler> scheduler;  // built over *kv
  bool overlap = false;                  // scheduler.overlap: plan one step ahead
  // The executor keeps steps in flight (Executor::max_steps_in_flight() > 1):
  // it answers a step when its logits come back, and is asked for them when
  // the scheduler has nothing more to start (flush_atom).
  bool pipelined = false;
};

struct EngineParts {
  std::shared_ptr<Executor> executor;
  std::shared_ptr<SchedulerParts> scheduling;
};

// Builds the executor (make_executor), then the allocator sized to its KV
// slots (the allocator's block size is the one the scheduler's steps carry
// to the attention plugin), then the scheduler; logs what was built. Throws
// what each of them throws (config, plugins, weights, capacity). `config`
// must have passed validate(); the checkpoint must outlive the parts. With
// kv_events, the allocator reports its prefix-cache events there. With
// disaggregation.mode prefill, finished prefills with an export key leave
// their K/V in SchedulerParts::handoffs; every scheduler can restore
// handed-off K/V of its own layout (kv_handoff_layout).
EngineParts build_engine_parts(const EngineConfig& config, std::shared_ptr<const Checkpoint> checkpoint,
                               PluginRegistry& plugins, std::shared_ptr<KvEventLog> kv_events = nullptr);

// What a KvHandoff saved by this configuration holds, as a string two
// replicas compare: the model's KV shape, the KV dtype, the block size and
// the tensor degree (which splits the saved heads by rank).
std::string kv_handoff_layout(const EngineConfig& config, const ModelConfig& model, DType kv_dtype);

}  // namespace llmk
