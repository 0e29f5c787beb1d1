// Shared by the `llmk quantize` tests: stories260K, a calibration text in
// its own register (not one of the golden prompts) and the options the tests
// quantize with (4 samples of 64 tokens).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "apps/quantize/quantizer.hpp"
#include "core/tokenizer.hpp"

namespace llmk::test {

inline const std::filesystem::path kStories = std::filesystem::path(LLMK_SHARED_DIR) / "models" / "stories260K";

inline const char* kCalibration =
    "Once upon a time, there was a small dog named Max. Max liked to run in the big green park with his friend Sam. "
    "One day, Max found a shiny red box under a tree. He barked and wagged his tail. Sam came and opened the box. "
    "Inside there was a little toy car! Max and Sam played with the car all day. When the sun went down, they went "
    "home and had a warm dinner. Mom said, \"You two look so happy today.\" Max was tired but he felt very good. "
    "The next morning, a girl named Amy came to the park. She was sad because she lost her doll. Max wanted to help. "
    "He ran around the park and looked under every bush. At last he found the doll near the pond. Amy hugged Max "
    "and said thank you. They became good friends and played together every day after that.";

inline std::vector<int32_t> calibration_tokens() {
  const Tokenizer tok(kStories / "tokenizer.model");
  return tok.encode(kCalibration, false);
}

inline quantize::QuantizeOptions options(quantize::Method method, int bits, int64_t group, bool act_order = false) {
  quantize::QuantizeOptions o;
  o.method = method;
  o.spec.bits = bits;
  o.spec.group_size = group;
  o.spec.act_order = act_order;
  o.spec.min_zero = method == quantize::Method::awq ? 0 : 1;
  o.num_samples = 4;
  o.seq_len = 64;
  return o;
}

}  // namespace llmk::test
