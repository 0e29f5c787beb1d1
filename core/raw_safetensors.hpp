// Any safetensors file's entries with their dtype names, shapes and bytes
// (quantized checkpoints store U8 / I8 / I32 / I64 tensors beside the float
// ones that core/safetensors.hpp reads), for the quantized-checkpoint readers
// (core/bnb_checkpoint.hpp, core/compressed_tensors_checkpoint.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/safetensors.hpp"

namespace llmk {

struct RawEntry {
  std::string dtype;  // the file's name: "U8", "I32", "F32", ...
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // inside the mapping
  size_t bytes = 0;
};

// Bytes per element of a safetensors dtype name; 0 for an unknown one.
size_t raw_dtype_size(const std::string& dtype);

// Every entry of a mapped file (its header validated: JSON, dtypes known,
// offsets inside the data and matching the shape). Throws
// Error(bad_checkpoint) naming the file and tensor.
std::map<std::string, RawEntry> read_raw_entries(const MappedFile& file);

}  // namespace llmk
