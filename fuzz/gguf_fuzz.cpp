// libFuzzer harness for the GGUF reader: any bytes either parse or throw
// llmk::Error; nothing crashes, reads out of bounds or allocates without
// bound. A file that parses also goes through the model-config, tokenizer
// and decoder paths that consume its metadata and tensors.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/error.hpp"
#include "core/gguf.hpp"
#include "core/gguf_checkpoint.hpp"
#include "core/gguf_tokenizer.hpp"
#include "core/gguf_types.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace llmk;
  try {
    // The whole loader: config, name and shape checks, dequantization and
    // the Q/K row permutation of every tensor it accepts.
    load_gguf_checkpoint(std::make_unique<GgufFile>(data, size, "fuzz.gguf"));
  } catch (const Error&) {
  }
  try {
    const GgufFile file(data, size, "fuzz.gguf");
    try {
      gguf_sentencepiece_model_proto(file);
    } catch (const Error&) {
    }
    try {
      gguf_bpe_vocab(file);
    } catch (const Error&) {
    }
    std::vector<float> values;
    for (const GgufTensorInfo& t : file.tensors()) {
      const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(t.type));
      if (!info->can_dequantize || t.numel() > (1u << 20)) continue;
      values.resize(t.numel());
      dequantize_ggml(t.type, file.tensor_data(t), values.data(), static_cast<int64_t>(values.size()));
    }
  } catch (const Error&) {
  }
  return 0;
}
