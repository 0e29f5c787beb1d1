// The weights of the Llama forward as the CPU executor holds them: linear
// layers built by the linear plugins (q/k/v and gate/up fused), norms and
// q/k/v biases in f32 (the forward adds biases after the plugin's matmul, so
// every linear plugin serves biased models unchanged), and the embedding
// table borrowed from the checkpoint.
//
// Which plugin builds a weight: plugins.linear for float weights;
// for a weight stored as ggml blocks (a GGUF file's quantized tensors),
// plugins.linear when it computes on that type, else plugins.linear_blocks
// (linear.gguf: the file's blocks, never dequantized) when it does, else
// the weight is dequantized to F32 at load for plugins.linear, and the load
// logs one line naming those tensors and what that costs in memory. A
// GPTQ/AWQ weight (DType::int4_groups / int8_groups, core/int_groups.hpp)
// goes the same way, its own plugin (linear.int4, linear.uint8_zp) tried
// after plugins.linear_blocks, each projection of a fused layer a part.
// A GPTQ weight with SpQR-style outliers (the checkpoint's
// <projection>.outlier_row_ptr/_cols/_values) has their sparse product added
// by the linear layer to what the plugin computed (core/linear_layer.hpp),
// whichever plugin that is; on the CPU only: another device is refused,
// naming the tensor.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/linear_layer.hpp"
#include "core/model_runtime.hpp"
#include "core/parallel.hpp"
#include "core/plugin_loader.hpp"

namespace llmk {

struct LayerWeights {
  std::vector<float> input_norm, post_norm;  // [hidden]
  std::unique_ptr<LinearLayer> qkv;          // [q_dim + 2 kv_dim, hidden]
  std::vector<float> qkv_bias;               // [q_dim + 2 kv_dim] (q, k, v biases), empty when the model has none
  std::unique_ptr<LinearLayer> o;            // [hidden, q_dim]
  std::unique_ptr<LinearLayer> gate_up;      // [2 intermediate, hidden]
  std::unique_ptr<LinearLayer> down;         // [hidden, intermediate]
};

struct ModelWeights {
  // A rank's slices of the checkpoint's tensors (tensor parallelism), which
  // layers may borrow: declared first, destroyed last.
  std::shared_ptr<TensorSlices> slices;
  // [num_layers]; under pipeline parallelism only the stage's layers are built.
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;             // [hidden]
  std::unique_ptr<LinearLayer> lm_head;      // [vocab, hidden]; the last stage's, of its vocabulary rows
  const TensorView* embed = nullptr;         // [vocab, hidden], f32/f16/bf16 or ggml blocks, owned by the checkpoint
  int64_t embed_first = 0;                   // the vocabulary row embed's row 0 is (tensor parallelism)

  // "linear.dense" or "linear.dense, linear.gguf (Q4_K, Q6_K)": the plugins
  // the layers run on, for logs and reports.
  std::string linear_plugins;

  // In the linear plugins' formats plus embeddings and norms.
  size_t bytes() const;
};

// Where the linear layers run: their device (desc.device; activations are
// F32) and the workspace they share, in that device's memory.
struct LinearPlacement {
  uint32_t device = LLMK_DEVICE_CPU;
  std::shared_ptr<LinearWorkspace> workspace = std::make_shared<LinearWorkspace>();
};

// Builds every linear layer (max_step_tokens rows each) and converts the
// norms (host f32; a device executor uploads them). The checkpoint must
// outlive the weights: plugins may borrow its tensors. Throws Error for an
// embedding dtype the forward cannot read. With a shard, only its share:
// the stage's layers, cut to the tensor rank's heads, MLP columns and
// vocabulary rows (core/parallel.hpp); a cut a stored block layout cannot
// make is refused naming the tensor.
ModelWeights load_weights(const Checkpoint& checkpoint, PluginRegistry& plugins, const EngineConfig& cfg,
                          const ModelRuntime& runtime, const LinearPlacement& placement = {},
                          const ModelShard* shard = nullptr);

// out[t, :] = the embedding rows of ids[0..n) as f32 (ggml blocks decoded).
// A table of vocabulary rows [first, first + rows) writes zeros for the ids
// outside them (a vocabulary-parallel embedding, summed over the ranks).
void embed_rows(const TensorView& table, const int32_t* ids, int64_t n, float* out, int64_t first = 0);

}  // namespace llmk
