#include "core/gguf_bpe_tokenizer.hpp"

#include <array>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace llmk::detail {

namespace {

// The split regexes of the byte-level BPE families. Where a family's
// tokenizer.json spells its pattern with Oniguruma features PCRE2 shares
// ((?i:...), \p{Lu}), that spelling is used as the file has it.
constexpr const char* kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kChatGlm4Split =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt2Split = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// GPT-2's pattern without the final \s+ (whitespace it leaves is a piece of its own anyway).
constexpr const char* kGpt2Words = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr const char* kTekkenSplit =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kDeepseekLetters =
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373"
    "\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f"
    "\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
    "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d"
    "\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4"
    "\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d"
    "\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a"
    "\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2"
    "\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+";
constexpr const char* kDeepseekCjk = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+";
constexpr const char* kBloomSplit = R"( ?[^(\s|.,!?…。，、।۔،)]+)";

// One pre-tokenizer as llama.cpp names it: the regexes that split the text
// one after another (each splits every piece the ones before it made into
// matches and the stretches between them), and the model settings that go
// with the name.
struct PreTokenizerFamily {
  std::vector<std::string_view> names;
  std::vector<const char*> regexes;
  bool ignore_merges = false;
  bool nfc = false;     // NFC normalizer, as Qwen2's tokenizer.json has
  bool no_bos = false;  // the model has no BOS, whatever the metadata says
};

const std::vector<PreTokenizerFamily>& families() {
  static const std::vector<PreTokenizerFamily> list = {
      {{"llama3", "llama-v3", "llama-bpe", "falcon3"}, {kLlama3Split}, true},
      {{"dbrx", "smaug-bpe"}, {kLlama3Split}},
      {{"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"}, {kQwen2Split}, false, true},
      {{"deepseek-llm"},
       {"[\r\n]", kDeepseekLetters, "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+", "\\s+$",
        kDeepseekCjk, "\\p{N}+"}},
      {{"deepseek-v3"},
       {"\\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"deepseek-coder"}, {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kDeepseekCjk, "\\p{N}"}},
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2Words, "[0-9][0-9][0-9]"}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}, {"\\p{N}", kGpt2Words}},
      {{"gpt2", "gpt-2", "mpt", "olmo", "jais", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es",
        "jina-v2-de", "jina-v2-code", "roberta-bpe"},
       {kGpt2Split}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {kBloomSplit}},
      {{"chatglm-bpe"}, {kChatGlm4Split}, false, false, true},
      {{"viking"}, {kBloomSplit, "\\p{N}"}},
      {{"tekken"}, {kTekkenSplit}, true},
      {{"chameleon"},
       {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
        "[\\p{P}!-/:-@\\[-`{-~]", kGpt2Words}},
      {{"default"}, {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2Words, "\\p{N}+"}},
  };
  return list;
}

std::string known_names() {
  std::string out;
  for (const auto& family : families()) {
    for (std::string_view name : family.names) {
      if (!out.empty()) out += ", ";
      out += name;
    }
  }
  return out;
}

constexpr int32_t kTypeControl = 3;
constexpr int32_t kTypeUserDefined = 4;

}  // namespace

TokenizerJsonSpec gguf_bpe_spec(const GgufBpeVocab& v, const std::string& where) {
  TokenizerJsonSpec spec;
  const PreTokenizerFamily* family = nullptr;
  for (const auto& f : families()) {
    for (std::string_view name : f.names) {
      if (name == v.pre_tokenizer) family = &f;
    }
  }
  if (family == nullptr)
    throw Error(ErrorCode::unsupported, where + ": tokenizer.ggml.pre '" + v.pre_tokenizer +
                                            "' is not supported (supported: " + known_names() + ")");
  spec.bpe.ignore_merges = family->ignore_merges;
  if (family->nfc)
    spec.normalizer.push_back(NormalizerStep{NormalizerStep::Kind::unicode, NormalForm::nfc, {}, {}, nullptr});
  for (const char* regex : family->regexes) {
    PreTokenizerStep split_step;
    split_step.kind = PreTokenizerStep::Kind::split;
    split_step.regex = std::make_shared<UnicodeRegex>(regex);
    spec.pre_tokenizer.push_back(std::move(split_step));
  }
  PreTokenizerStep bytes;
  bytes.kind = PreTokenizerStep::Kind::byte_level;  // no regex of its own: the splits above did it
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
  const int32_t bos_id = family->no_bos ? -1 : v.bos_id;
  if (v.add_bos && bos_id >= 0) spec.template_prefix.push_back(bos_id);
  spec.decoder.push_back(DecoderStep{DecoderStep::Kind::byte_level, {}, {}, 0, 0});
  spec.bos_id = bos_id;
  if (v.eos_id >= 0) spec.eos_id = v.eos_id;
  return spec;
}

}  // namespace llmk::detail
