// A step's int32 arrays on their way to the CUDA device: one buffer holding
// them all, staged in pinned host memory and copied up in one transfer; and
// the decode steps CUDA graphs replay, padded to a batch-size bucket.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/cuda/device_memory.hpp"
#include "core/step.hpp"

namespace llmk {

// The offsets of the step's arrays inside the metadata buffer, in int32s,
// each array 64-byte aligned. cache_positions: [num_tokens], each row's
// position within its sequence's cache (context_lens[s] minus the rows of s
// from it on), which differs from its text position (positions) once a
// streaming window has evicted rows.
struct MetaLayout {
  size_t token_ids, positions, cache_positions, query_start, context_lens, slot_mapping, block_tables, logits_rows;
  size_t fed_back_rows, fed_back_previous;  // [fed_back.size()] each
  size_t tree_parents;                       // [tree_parents.size()]: empty outside token trees
  size_t total;
};

MetaLayout meta_layout(const StepBatch& b);

// A step's metadata: its layout, the pinned staging and the device copy.
struct MetaBuffers {
  MetaLayout layout{};
  cuda::PinnedBuffer host;
  cuda::DeviceBuffer device;
  const int32_t* at(size_t offset) const { return device.as<const int32_t>() + offset; }
};

// Writes the step's arrays into the pinned buffer, growing both buffers (new
// addresses) when the step needs more room. The caller makes sure no upload
// still reads the pinned buffer.
void stage_meta(const StepBatch& b, MetaBuffers& m);

// The bucket a decode step is replayed in, or 0 for a step that runs
// eagerly: every sequence decoding one token with its logits row, in order,
// padded to 1, 2, 4, 8 or a multiple of 8 rows within max_step_tokens.
int32_t graph_bucket(const StepBatch& b, uint32_t max_step_tokens);

// The decode step padded to `bucket` rows (padding rows: token 0 at position 0
// of a one-token context, K/V not stored, logits ignored), its block tables
// widened to what a sequence of max_seq_len tokens can need.
StepBatch padded_step(const StepBatch& b, int32_t bucket, uint32_t max_seq_len);

}  // namespace llmk
