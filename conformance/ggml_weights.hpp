// Weights stored as ggml blocks for the linear suite: random blocks of a
// GGUF tensor type ("ggml:Q4_K" in a plugin's weight_dtypes), with scales
// that keep the decoded values O(1), and their exact values as core's
// decoders give them (core/gguf_blocks.hpp).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace llmk::conformance {

struct GgmlWeightType {
  uint32_t dtype = 0;        // LLMK_DTYPE_GGML_BASE + the ggml type id
  int64_t block_values = 0;  // values per block
};

// The type a weight_dtypes entry "ggml:NAME" names; false (with why) for a
// name ggml does not have or this suite cannot make blocks of.
bool parse_ggml_weight_type(const std::string& entry, GgmlWeightType& type, std::string& why);

// rows x cols values as random blocks (cols a whole number of blocks), and
// their decoded values.
std::vector<uint8_t> random_ggml_weight(const GgmlWeightType& type, int64_t rows, int64_t cols, std::mt19937& rng,
                                        std::vector<double>& values);

}  // namespace llmk::conformance
