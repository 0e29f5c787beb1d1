// compressed-tensors checkpoints (llm-compressor's format; config.json's
// quantization_config.quant_method "compressed-tensors"), integer weights:
//   format "pack-quantized" (4 or 8 bits): X.weight_packed I32 [out, ceil(in * bits / 32)],
//       value k of a row at bits (k % (32 / bits)) * bits of word k / (32 / bits), stored as q + 2^(bits-1)
//       (q signed); X.weight_scale [out, num_groups] (F32, F16 or BF16); X.weight_shape I64/I32 [2];
//       asymmetric: X.weight_zero_point I32 [ceil(out * bits / 32), num_groups], packed the same way
//       along the output dimension
//   format "int-quantized" or "naive-quantized" (8 bits): X.weight I8 [out, in], X.weight_scale,
//       [X.weight_zero_point I8]; int-quantized is what llm-compressor writes for W8A8 (channel
//       scales [out, 1]; its input_activations, int8 per token and dynamic, need no tensor: serve
//       such a checkpoint with linear.int8, which quantizes activations that way)
// one config group (weights: num_bits, symmetric, strategy "channel" or
// "group" with group_size, or "tensor"). A weight value is
// (q - zero_point) * scale of its group, computed in f32 (one rounding);
// tensors outside the group (ignore: lm_head) are F32, F16 or BF16.
//
// 4-bit pack-quantized weights whose group size divides in_features load as
// stored, as linear API 3.2's integer groups (DType::int4_groups, core/
// int_groups.hpp: q + 8 with zero point + 8, the same values exactly), which
// plugins.linear computes on where it takes them, else linear.int4 (as GPTQ
// checkpoints' are); other weights are dequantized that way to F32 for
// plugins.linear. One file (model.safetensors). Errors name the file and tensor
// (Error(bad_checkpoint)) or the config key (Error(unsupported): another
// format such as float-quantized or marlin-24, another strategy, more than
// one config group).
#pragma once

#include <filesystem>
#include <memory>

#include "core/checkpoint.hpp"

namespace llmk {

// True when model_dir's config.json names quant_method compressed-tensors.
bool is_compressed_tensors_checkpoint(const std::filesystem::path& model_dir);

std::unique_ptr<Checkpoint> load_compressed_tensors_checkpoint(const std::filesystem::path& model_dir);

}  // namespace llmk
