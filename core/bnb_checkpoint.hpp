// bitsandbytes 4-bit checkpoints (transformers' BitsAndBytesConfig with
// load_in_4bit, saved with save_pretrained): a Hugging Face directory whose
// model.safetensors stores each quantized linear weight W as
//   W                                  U8 [ceil(n / 2), 1]: two 4-bit codes a byte, the first in the high nibble
//   W.absmax                           F32 [num_blocks] one scale per blocksize values of the flattened weight;
//                                      with double quantization U8 codes of those scales
//   W.quant_map                        F32 [16] the code book (NF4's normal quantiles, or FP4's)
//   W.nested_absmax, W.nested_quant_map  (double quantization) F32 [ceil(num_blocks / nested_blocksize)],
//                                      F32 [256]: absmax = nested_quant_map[code] * nested_absmax[block] + nested_offset
//   W.quant_state.bitsandbytes__nf4    U8: JSON {quant_type, blocksize, shape, dtype, [nested_blocksize,
//                                      nested_offset, nested_dtype]}
// and every other tensor as F32, F16 or BF16. The weight's value i (of the
// row-major shape) is quant_map[code i] * absmax[i / blocksize].
//
// Loaded weights are dequantized exactly that way to F32 (products rounded
// once, as the f32 arithmetic of the format's reference dequantizer), for
// plugins.linear; linear.lut4 with {"codebook": "nf4", "block_size": B,
// "scale": "absmax"} recovers the same codes and scales from them wherever a
// row is whole blocks (the block's largest weight is +-absmax exactly), so it
// serves the file's own NF4 values. One file (model.safetensors); sharded
// bitsandbytes checkpoints are refused. config.json's quantization_config
// must name bitsandbytes.
//
// Errors are Error(bad_checkpoint) naming the file and tensor: a missing
// absmax or quant_map, a quant_map that is not 16 values, a shape that does
// not match the config or the packed bytes, a code outside the nested map.
#pragma once

#include <filesystem>
#include <memory>

#include "core/checkpoint.hpp"

namespace llmk {

// True when model_dir holds a bitsandbytes 4-bit checkpoint (a
// *.quant_state.bitsandbytes__nf4 / __fp4 tensor in its safetensors).
bool is_bnb_4bit_checkpoint(const std::filesystem::path& model_dir);

std::unique_ptr<Checkpoint> load_bnb_checkpoint(const std::filesystem::path& model_dir);

}  // namespace llmk
