// The attention plugin's inputs that every executor builds the same way: the
// desc (once, when the executor loads the plugin) and the step's metadata for
// plan() (once per step). The executors differ only in the device they name
// and in where the step's arrays live on it.
#pragma once

#include <cstdint>

#include "core/config.hpp"
#include "core/model_config.hpp"
#include "core/model_runtime.hpp"
#include "core/step.hpp"
#include "plugins/api/llmk_attention.h"

namespace llmk {

// The desc for `model` at the resolved runtime, on `device` with f32
// activations. Threads: the runtime's on the CPU, 1 elsewhere. The desc's
// options point into `ecfg`, which must outlive the desc's use.
llmk_attention_desc attention_desc(const ModelConfig& model, const ModelRuntime& rt, const EngineConfig& ecfg,
                                   llmk_device device);

// Where the plugin reads the step's int32 arrays on its device (the
// llmk_attention_step's device_* arrays).
struct AttentionStepArrays {
  const int32_t* query_start = nullptr;   // [num_seqs + 1]
  const int32_t* context_lens = nullptr;  // [num_seqs]
  const int32_t* slot_mapping = nullptr;  // [num_tokens]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  const int32_t* tree_parents = nullptr;  // [num_tokens] when the batch has trees (API 3.3), else null
};

// The step's metadata for plan(): the batch's host arrays, `device` for the
// device_* arrays, `num_slots` each layer's cache slots. The batch must
// outlive the plan() call.
llmk_attention_step attention_step(const StepBatch& b, uint32_t num_slots, const AttentionStepArrays& device);

// The same on the CPU, where the device arrays are the host ones.
llmk_attention_step attention_step(const StepBatch& b, uint32_t num_slots);

}  // namespace llmk
