#include "core/gguf_bpe_tokenizer.hpp"

#include <memory>
#include <utility>

#include "core/error.hpp"

namespace llmk::detail {

namespace {

// The split regexes of the byte-level BPE families (the tokenizer.json
// files those models ship carry the same patterns).
constexpr const char* kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt2Split = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

constexpr int32_t kTypeControl = 3;
constexpr int32_t kTypeUserDefined = 4;

}  // namespace

TokenizerJsonSpec gguf_bpe_spec(const GgufBpeVocab& v, const std::string& where) {
  TokenizerJsonSpec spec;
  const std::string& pre = v.pre_tokenizer;
  const char* split = nullptr;
  if (pre == "llama-bpe" || pre == "llama3") {
    split = kLlama3Split;
    spec.bpe.ignore_merges = true;
  } else if (pre == "qwen2") {
    split = kQwen2Split;
    spec.normalizer.push_back(NormalizerStep{NormalizerStep::Kind::unicode, NormalForm::nfc, {}, {}, nullptr});
  } else if (pre == "default" || pre == "gpt2" || pre == "gpt-2") {
    split = kGpt2Split;
  } else {
    throw Error(ErrorCode::unsupported, where + ": tokenizer.ggml.pre '" + pre +
                                            "' is not supported (llama-bpe, llama3, qwen2, default, gpt2)");
  }
  PreTokenizerStep split_step;
  split_step.kind = PreTokenizerStep::Kind::split;
  split_step.regex = std::make_shared<UnicodeRegex>(split);
  spec.pre_tokenizer.push_back(std::move(split_step));
  PreTokenizerStep bytes;
  bytes.kind = PreTokenizerStep::Kind::byte_level;  // no regex of its own: the split above did it
  spec.pre_tokenizer.push_back(std::move(bytes));

  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const int32_t type = id < v.token_types.size() ? v.token_types[id] : 1;
    if (type == kTypeControl || type == kTypeUserDefined) {
      AddedTokenSpec added;
      added.id = static_cast<int32_t>(id);
      added.content = v.tokens[id];
      added.special = type == kTypeControl;
      spec.added_tokens.push_back(std::move(added));
      continue;
    }
    if (!spec.vocab.emplace(v.tokens[id], static_cast<int32_t>(id)).second)
      throw Error(ErrorCode::bad_checkpoint,
                  where + ": tokenizer.ggml.tokens: token " + std::to_string(id) + " '" + v.tokens[id] + "' repeats");
  }
  spec.merges.reserve(v.merges.size());
  for (const std::string& m : v.merges) {
    const size_t space = m.find(' ');  // gguf_bpe_vocab checked the form
    spec.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
  }
  if (v.add_bos && v.bos_id >= 0) spec.template_prefix.push_back(v.bos_id);
  spec.decoder.push_back(DecoderStep{DecoderStep::Kind::byte_level, {}, {}, 0, 0});
  if (v.bos_id >= 0) spec.bos_id = v.bos_id;
  if (v.eos_id >= 0) spec.eos_id = v.eos_id;
  return spec;
}

}  // namespace llmk::detail
