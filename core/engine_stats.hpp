// EngineStats: the scheduler's counters as the engine reports them (Engine,
// the front ends' /metrics and ZeroMQ stats, benchmarks).
#pragma once

#include <cstdint>

#include "plugins/api/llmk_kv_allocator.h"  // llmk_kv_usage

namespace llmk {

struct EngineStats {
  uint64_t num_running = 0;           // sequences holding KV
  uint64_t num_waiting = 0;           // queued, not yet admitted (or preempted)
  uint64_t num_requests_total = 0;
  uint64_t num_requests_finished = 0;
  uint64_t num_prompt_tokens = 0;     // submitted
  uint64_t num_prefill_tokens = 0;    // actually computed (prefix hits and recompute excluded/included)
  uint64_t num_generated_tokens = 0;
  uint64_t num_preemptions = 0;
  uint64_t num_steps = 0;
  double mean_batch_seqs = 0;         // mean sequences per step
  double mean_batch_tokens = 0;       // mean tokens per step
  llmk_kv_usage kv{};
  uint64_t peak_running = 0;
  uint64_t peak_steps_in_flight = 0;  // steps planned and not yet updated at once (pipelined: up to the stages)
  uint64_t num_handoffs_exported = 0;  // prefills whose K/V went to a decode replica's box
  uint64_t num_handoffs_imported = 0;  // requests started from a prefill replica's K/V
  // Speculative decoding: decodes that verified drafts, drafted tokens, accepted ones.
  uint64_t num_spec_drafts = 0;
  uint64_t num_spec_draft_tokens = 0;
  uint64_t num_spec_accepted_tokens = 0;
};

}  // namespace llmk
