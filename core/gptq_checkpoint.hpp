// GPTQ and AWQ checkpoints: a Hugging Face folder whose config.json has a
// quantization_config (quant_method "gptq" or "awq"), or a GPTQ folder with
// quantize_config.json, and safetensors holding each quantized projection
// as <name>.qweight / .qzeros / .scales (/ .g_idx). Each becomes a
// TensorView <name>.weight of DType::int4_groups or int8_groups pointing at
// an llmk_linear_int_groups (core/int_groups.hpp): the integers as stored,
// repacked one row per output feature, never dequantized here.
//
// GPTQ (AutoGPTQ / GPTQModel layout), b = bits (4 or 8), p = 32 / b:
//   qweight int32 [in / p, out]: value (k, n) in word (k / p, n), bits b (k % p);
//   qzeros  int32 [groups, out / p]: zero (g, n) in word (g, n / p), bits b (n % p);
//   scales  f16   [groups, out];  g_idx int32 [in] (optional): the group of input k.
//   w[n, k] = scales[g, n] * (q(k, n) - zero(g, n)), g = g_idx[k] (k / group_size without it).
// checkpoint_format "gptq" (v1, the default) stores each zero point minus
// one; "gptq_v2" stores it as is. With act-order (desc_act) the g_idx is
// not k / group_size: the columns are sorted by group (stably) into the
// weight's input_order, which the linear plugin gathers x by; each group
// must then hold group_size columns.
// AWQ (AutoAWQ, version "gemm", 4 bits): qweight int32 [in, out / 8] and
// qzeros int32 [groups, out / 8] packed along out, output 8c + j of word c in
// bits 4 * [0, 4, 1, 5, 2, 6, 3, 7][j]; scales f16 [groups, out]; no g_idx,
// zero points stored as is.
//
// SpQR-style outliers (`llmk quantize --outliers`, quantization_config's
// "outliers": {"format": "csr", ...}): beside a projection's qweight,
//   <name>.outlier_row_ptr I32 [out + 1], <name>.outlier_cols I32 [n],
//   <name>.outlier_values F16 or F32 [n]:
// CSR by output row, w[r, cols[j]] += values[j] (core/int_groups.hpp's
// OutlierCsr, the model's input columns). They become plain TensorViews of
// the checkpoint under those names (I32, I32, F32), which the linear layers
// add (core/model_weights.cpp). Refused, naming the tensor: a row_ptr that
// does not start at 0, is not monotonic or does not end at the number of
// columns, values and cols of different lengths, a column out of range or
// out of order, one of the three without the others.
//
// Tensors without a qweight (embeddings, norms, an unquantized lm_head) are
// read as in a plain checkpoint. Refused, naming the tensor: a missing
// qzeros or scales, shapes that do not match the config, a group size that
// does not divide in_features, a g_idx value out of range, a zero point out
// of range.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "core/checkpoint.hpp"

namespace llmk {

struct QuantizedFormat {
  std::string method;     // "gptq" or "awq"
  int bits = 4;
  int group_size = 128;   // -1: one group per row
  bool desc_act = false;  // GPTQ act-order (the g_idx says; this is informational)
  bool v2 = false;        // GPTQ zero points stored without the off-by-one
  bool outliers = false;  // quantization_config declares SpQR-style outliers (informational: the tensors say)
};

// The folder's quantization, from config.json's quantization_config or
// quantize_config.json; nullopt for a plain checkpoint. Throws
// Error(bad_checkpoint/unsupported) for a method or bit width it cannot read.
std::optional<QuantizedFormat> read_quantized_format(const std::filesystem::path& model_dir);

// Loads a GPTQ/AWQ folder (single model.safetensors or sharded with an index).
std::unique_ptr<Checkpoint> load_quantized_checkpoint(const std::filesystem::path& model_dir,
                                                      const QuantizedFormat& format);

}  // namespace llmk
