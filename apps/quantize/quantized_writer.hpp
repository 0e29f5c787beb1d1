// Writes what `llmk quantize` computed as a Hugging Face folder other
// engines read: config.json (with quantization_config), model.safetensors
// with each quantized projection packed as GPTQ (v1: checkpoint_format
// "gptq", zero points stored minus one; qweight/qzeros/scales/g_idx, plus
// quantize_config.json) or AWQ (GEMM packing), the layouts
// core/gptq_checkpoint.hpp reads, or SmoothQuant's W8A8 as compressed-tensors
// "int-quantized" (int8 weights with channel scales, activations int8 per
// token, dynamic: llm-compressor's W8A8 scheme, which
// core/compressed_tensors_checkpoint.hpp reads); every other tensor in F32.
// GPTQ with SpQR-style outliers adds three tensors per projection (CSR,
// core/gptq_checkpoint.hpp) and quantization_config's "outliers", in the
// same file: an engine that does not know them fails on names that are
// none of its parameters rather than serving the integers alone, which are
// no model without them (docs/PERFORMANCE.md). The tokenizer
// files of a source folder are copied; a GGUF source's tokenizer stays in
// the GGUF (load the folder with --tokenizer SOURCE.gguf).
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/quantize/quantizer.hpp"
#include "core/checkpoint.hpp"

namespace llmk::quantize {

// The config.json object of a ModelConfig (architecture, shape, rope, ids, tie).
nlohmann::json config_json(const ModelConfig& config);

// Returns a note for the user ("" when none): how to load the folder.
std::string write_quantized(const Checkpoint& source, const std::filesystem::path& source_path,
                            const QuantizeResult& result, const QuantizeOptions& options,
                            const std::filesystem::path& out_dir);

}  // namespace llmk::quantize
