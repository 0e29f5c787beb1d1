// tokenizer.json: encode and decode are identical to Hugging Face's
// `tokenizers`, run at test time, for Llama-3-, Qwen2- and Llama-2-style
// files (legacy and Metaspace), Metaspace files of every kind, added tokens
// of every flag, and GGUF vocabularies under every tokenizer.ggml.pre name
// (tests/core/tokenizer_json_reference.py builds them).
#include <catch2/catch.hpp>

#include "core/checkpoint.hpp"
#include "core/error.hpp"
#include "core/tokenizer.hpp"
#include "support/skip.hpp"
#include "tokenizer_json_fixtures.hpp"

using llmk::Tokenizer;
namespace fs = std::filesystem;
namespace t = llmk::test;

namespace {

std::string show(const std::vector<int32_t>& ids) { return nlohmann::json(ids).dump(); }

// Random id lists over the whole vocabulary (special tokens included), and
// lists dense in the ids `rich` (byte tokens), to reach invalid UTF-8.
std::vector<std::vector<int32_t>> random_id_lists(int32_t vocab_size, const std::vector<int32_t>& rich, int count) {
  std::mt19937 rng(99);
  std::vector<std::vector<int32_t>> lists;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> ids(1 + rng() % 14);
    for (auto& id : ids) {
      id = (!rich.empty() && rng() % 2) ? rich[rng() % rich.size()] : static_cast<int32_t>(rng() % vocab_size);
    }
    lists.push_back(ids);
  }
  return lists;
}

// Compares llmk with Hugging Face on the corpus and random ids: llmk reads
// `llmk_file` (default: the tokenizer.json itself), Hugging Face `file`.
void check_against_hf(const fs::path& file, const std::vector<int32_t>& rich_ids, const fs::path& llmk_file = {}) {
  Tokenizer tokenizer(llmk_file.empty() ? file : llmk_file);
  const auto texts = t::varied_corpus();
  const auto id_lists = random_id_lists(tokenizer.vocab_size(), rich_ids, 400);
  const auto ref = t::hf_reference(file, texts, id_lists);
  REQUIRE(ref.encode.size() == texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    INFO("text " << i << ": " << nlohmann::json(texts[i]).dump());
    const auto ids = tokenizer.encode(texts[i], false);
    INFO("llmk " << show(ids) << "\nhf   " << show(ref.encode[i]));
    CHECK(ids == ref.encode[i]);
    CHECK(tokenizer.encode(texts[i], true) == ref.encode_bos[i]);
    CHECK(tokenizer.encode_with_special_tokens(texts[i], false) == ids);
    CHECK(tokenizer.decode(ref.encode[i]) == ref.decode[i]);
  }
  for (size_t i = 0; i < id_lists.size(); ++i) {
    INFO("ids " << show(id_lists[i]));
    CHECK(tokenizer.decode(id_lists[i]) == ref.decode_ids[i]);
  }
}

// The ids whose pieces are one raw byte of a multi-byte character.
std::vector<int32_t> partial_character_ids(const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const std::string piece = tokenizer.id_to_piece(id);
    if (tokenizer.piece_kind(id) == Tokenizer::PieceKind::byte && !llmk::is_valid_utf8(piece)) ids.push_back(id);
  }
  return ids;
}

}  // namespace

TEST_CASE("A Llama-3-style tokenizer.json encodes and decodes a varied corpus exactly as Hugging Face does",
          "[tokenizer_json]") {
  const auto dir = t::fixtures_dir();
  if (!dir) LLMK_SKIP("no project venv with tokenizers");
  const fs::path file = *dir / "llama3" / "tokenizer.json";
  Tokenizer tokenizer(file);
  check_against_hf(file, partial_character_ids(tokenizer));
}

TEST_CASE("A Qwen2-style tokenizer.json (NFC, its own regex, non-special added tokens) matches Hugging Face",
          "[tokenizer_json]") {
  const auto dir = t::fixtures_dir();
  if (!dir) LLMK_SKIP("no project venv with tokenizers");
  const fs::path file = *dir / "qwen2" / "tokenizer.json";
  Tokenizer tokenizer(file);
  check_against_hf(file, partial_character_ids(tokenizer));
}

// A tokenizer.json's vocabulary written by PyPI's gguf package as llama.cpp's
// converter stores it (tests/gguf_write_models.py bpe-tokenizer).
static fs::path bpe_gguf(const fs::path& tokenizer_json, const std::string& pre) {
  const fs::path out = t::make_temp_dir("llmk_bpe_gguf") / "tokenizer.gguf";
  const std::string cmd = t::quoted(fs::path(t::venv_python())) + " " +
                          t::quoted(fs::path(LLMK_SOURCE_DIR) / "tests" / "gguf_write_models.py") + " bpe-tokenizer " +
                          t::quoted(tokenizer_json) + " " + pre + " " + t::quoted(out) + " >/dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  return out;
}

TEST_CASE("A GGUF file's byte-level BPE tokenizer (llama-bpe, qwen2) encodes and decodes as its tokenizer.json does",
          "[tokenizer_json][gguf]") {
  const auto dir = t::fixtures_dir();
  if (!dir) LLMK_SKIP("no project venv with tokenizers");
  for (const auto& [family, pre] : {std::pair{"llama3", "llama-bpe"}, std::pair{"qwen2", "qwen2"}}) {
    INFO(family);
    const fs::path json_file = *dir / family / "tokenizer.json";
    const fs::path gguf_file = bpe_gguf(json_file, pre);
    Tokenizer from_gguf(gguf_file);
    Tokenizer from_json(json_file);
    CHECK(from_gguf.vocab_size() == from_json.vocab_size());
    CHECK(from_gguf.bos_id() == from_json.bos_id());
    check_against_hf(json_file, partial_character_ids(from_gguf), gguf_file);
    fs::remove_all(gguf_file.parent_path());
  }
}

// BASE_JSON with the pre-tokenizer llama.cpp's name `pre` stands for, built
// by the reference script as Hugging Face Split and ByteLevel steps.
static fs::path pretok_reference(const fs::path& base_json, const std::string& pre, const fs::path& dir) {
  const fs::path out = dir / ("pretok_" + pre) / "tokenizer.json";
  const std::string cmd = t::quoted(fs::path(t::venv_python())) + " " + t::quoted(t::reference_script()) + " pretok " +
                          t::quoted(base_json) + " " + pre + " " + t::quoted(out);
  REQUIRE(std::system(cmd.c_str()) == 0);
  return out;
}

TEST_CASE("Every tokenizer.ggml.pre name llama.cpp knows splits a GGUF vocabulary as Hugging Face does with its "
          "regexes",
          "[tokenizer_json][gguf]") {
  const auto dir = t::fixtures_dir();
  if (!dir) LLMK_SKIP("no project venv with tokenizers");
  const fs::path base = *dir / "llama3" / "tokenizer.json";
  const fs::path work = t::make_temp_dir("llmk_pretok");
  const std::vector<int32_t> rich = partial_character_ids(Tokenizer(base));
  for (const char* pre :
       {"llama3", "llama-v3", "llama-bpe", "falcon3", "dbrx", "smaug-bpe", "qwen2", "deepseek-r1-qwen", "megrez",
        "stablelm2", "deepseek-llm", "deepseek-v3", "deepseek-coder", "falcon", "starcoder", "refact", "command-r",
        "smollm", "codeshell", "exaone", "minerva-7b", "gpt2", "gpt-2", "mpt", "olmo", "jais", "phi-2", "jina-es",
        "jina-de", "gigachat", "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code", "roberta-bpe", "poro-chat",
        "bloom", "gpt3-finnish", "chatglm-bpe", "viking", "tekken", "chameleon", "default"}) {
    INFO("tokenizer.ggml.pre " << pre);
    const fs::path gguf_file = bpe_gguf(base, pre);
    check_against_hf(pretok_reference(base, pre, work), rich, gguf_file);
    fs::remove_all(gguf_file.parent_path());
  }
  fs::remove_all(work);
}

TEST_CASE("SmolLM2's GGUF tokenizer (smollm) matches Hugging Face with SmolLM2's own Digits and ByteLevel "
          "pre-tokenizer",
          "[tokenizer_json][gguf]") {
  const char* home = std::getenv("HOME");
  const fs::path gguf_file =
      fs::path(home != nullptr ? home : "") / ".cache" / "llmk" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(gguf_file)) LLMK_SKIP("no " + gguf_file.string());
  if (!t::fixtures_dir()) LLMK_SKIP("no project venv with tokenizers");
  const fs::path dir = t::make_temp_dir("llmk_smollm2");
  const fs::path json_file = dir / "tokenizer.json";
  const std::string cmd = t::quoted(fs::path(t::venv_python())) + " " + t::quoted(t::reference_script()) +
                          " gguf-json " + t::quoted(gguf_file) + " " + t::quoted(json_file);
  REQUIRE(std::system(cmd.c_str()) == 0);
  Tokenizer from_gguf(gguf_file);
  const auto rich = partial_character_ids(from_gguf);
  check_against_hf(json_file, rich, gguf_file);  // llama.cpp's smollm regexes
  check_against_hf(json_file, rich);              // the tokenizer.json itself (Digits)
  fs::remove_all(dir);
}

TEST_CASE("A GGUF byte-level BPE tokenizer with an unknown pre-tokenizer is refused by name", "[tokenizer_json][gguf]") {
  const auto dir = t::fixtures_dir();
  if (!dir) LLMK_SKIP("no project venv with tokenizers");
  const fs::path gguf_file = bpe_gguf(*dir / "qwen2" / "tokenizer.json", "no-such-pre");
  try {
    Tokenizer tokenizer(gguf_file);
    FAIL("a tokenizer with pre-tokenizer 'no-such-pre' loaded");
  } catch (const llmk::Error& e) {
    CHECK(e.code() == llmk::ErrorCode::unsupported);
    CHECK_THAT(std::string(e.what()), Catch::Contains("tokenizer.ggml.pre 'no-such-pre'") &&
                                          Catch::Contains("smollm") && Catch::Contains("tekken"));
  }
  fs::remove_all(gguf_file.parent_path());
}

TEST_CASE("Metaspace tokenizer.json files (every prepend_scheme, split or not) with flagged added tokens match "
          "Hugging Face",
          "[tokenizer_json]") {
  const auto dir = t::fixtures_dir();
  if (!dir) LLMK_SKIP("no project venv with tokenizers");
  for (const char* scheme : {"always", "first", "never"}) {
    for (const char* split : {"split", "nosplit"}) {
      const fs::path file = *dir / (std::string("metaspace_") + scheme + "_" + split) / "tokenizer.json";
      INFO(file.string());
      check_against_hf(file, partial_character_ids(Tokenizer(file)));
    }
  }
}

TEST_CASE("Llama 2 as transformers writes it without legacy (Metaspace, prepend_scheme first) matches Hugging Face",
          "[tokenizer_json]") {
  const auto dir = t::fixtures_dir();
  if (!dir) LLMK_SKIP("no project venv with tokenizers");
  const fs::path file = *dir / "llama2_metaspace" / "tokenizer.json";
  check_against_hf(file, partial_character_ids(Tokenizer(file)));
}

TEST_CASE("Added tokens with each flag (special, lstrip, rstrip, single_word, normalized) in Llama 2's tokenizer.json "
          "match Hugging Face",
          "[tokenizer_json]") {
  const auto dir = t::fixtures_dir();
  if (!dir) LLMK_SKIP("no project venv with tokenizers");
  const fs::path file = *dir / "llama2_flags" / "tokenizer.json";
  check_against_hf(file, partial_character_ids(Tokenizer(file)));
}

TEST_CASE("Llama 2 as a sentencepiece-style tokenizer.json matches Hugging Face", "[tokenizer_json]") {
  const auto dir = t::fixtures_dir();
  if (!dir) LLMK_SKIP("no project venv with tokenizers");
  std::vector<int32_t> byte_ids;
  for (int32_t id = 3; id < 3 + 256; ++id) byte_ids.push_back(id);  // <0x00>..<0xFF>
  check_against_hf(*dir / "llama2" / "tokenizer.json", byte_ids);
}

TEST_CASE("Llama 2's tokenizer.json and its sentencepiece model agree on the corpus and its special-token text",
          "[tokenizer_json]") {
  const auto dir = t::fixtures_dir();
  if (!dir) LLMK_SKIP("no project venv with tokenizers");
  Tokenizer json_tokenizer(*dir / "llama2" / "tokenizer.json");
  Tokenizer spm(t::llama2_spm_model());
  CHECK(json_tokenizer.vocab_size() == spm.vocab_size());
  CHECK(json_tokenizer.bos_id() == spm.bos_id());
  CHECK(json_tokenizer.eos_id() == spm.eos_id());
  for (const auto& text : t::varied_corpus()) {
    INFO("text: " << nlohmann::json(text).dump());
    // Hugging Face reads "<s>" in text as BOS, and so does the sentencepiece backend.
    const auto ids = json_tokenizer.encode(text, true);
    CHECK(spm.encode(text, true) == ids);
    // Hugging Face drops <unk> as a special token; sentencepiece shows " ⁇ ".
    if (text.find("<unk>") == std::string::npos) CHECK(json_tokenizer.decode(ids) == spm.decode(ids));
  }
  CHECK(spm.encode("<s>", false) == std::vector<int32_t>{spm.bos_id()});
  CHECK(spm.encode_with_special_tokens("<s>", false) == std::vector<int32_t>{spm.bos_id()});
}

TEST_CASE("Special and added tokens in text become their ids; decode drops only the special ones",
          "[tokenizer_json]") {
  const auto dir = t::fixtures_dir();
  if (!dir) LLMK_SKIP("no project venv with tokenizers");
  Tokenizer qwen(*dir / "qwen2" / "tokenizer.json");
  const auto ids = qwen.encode("<|im_start|>user\nhi<tool_call><|im_end|>", false);
  REQUIRE(ids.size() >= 4);
  CHECK(qwen.id_to_piece(ids.front()) == "<|im_start|>");
  CHECK(qwen.piece_kind(ids.front()) == Tokenizer::PieceKind::control);
  CHECK(qwen.id_to_piece(ids.back()) == "<|im_end|>");
  CHECK(qwen.id_to_piece(ids[ids.size() - 2]) == "<tool_call>");
  CHECK(qwen.decode(ids) == "user\nhi<tool_call>");
  // BOS/EOS from tokenizer_config.json: Qwen2 has no BOS.
  CHECK(qwen.bos_id() == -1);
  CHECK(qwen.id_to_piece(qwen.eos_id()) == "<|im_end|>");
  CHECK(qwen.encode("hi", true) == qwen.encode("hi", false));

  Tokenizer llama3(*dir / "llama3" / "tokenizer.json");
  CHECK(llama3.id_to_piece(llama3.bos_id()) == "<|begin_of_text|>");
  CHECK(llama3.id_to_piece(llama3.eos_id()) == "<|end_of_text|>");
  const auto with_bos = llama3.encode("hi", true);
  CHECK(with_bos.front() == llama3.bos_id());
  CHECK(std::vector<int32_t>(with_bos.begin() + 1, with_bos.end()) == llama3.encode("hi", false));
}

TEST_CASE("A model directory's tokenizer is tokenizer.model when present, else tokenizer.json", "[tokenizer_json]") {
  const fs::path dir = t::make_temp_dir("llmk_find_tokenizer");
  CHECK(llmk::find_tokenizer(dir).empty());
  std::ofstream(dir / "tokenizer.json") << "{}";
  CHECK(llmk::find_tokenizer(dir) == dir / "tokenizer.json");
  std::ofstream(dir / "tokenizer.model") << "";
  CHECK(llmk::find_tokenizer(dir) == dir / "tokenizer.model");
  fs::remove_all(dir);
}
