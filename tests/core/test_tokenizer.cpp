// Tokenizer: golden ids from the stories260K reference, decoding, errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/tokenizer.hpp"

using llmk::Tokenizer;

namespace {

const std::string kShared = LLMK_SHARED_DIR;
const std::string kStoriesModel = kShared + "/models/stories260K/tokenizer.model";
const std::string kLlamaModel = kShared + "/models/llama2-tokenizer/tokenizer.model";

nlohmann::json load_golden() {
  std::ifstream in(kShared + "/golden/stories260K.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("Encoding the golden prompts gives the reference input ids with BOS", "[tokenizer]") {
  Tokenizer tokenizer(kStoriesModel);
  const auto golden = load_golden();
  REQUIRE(golden["cases"].size() >= 3);
  for (const auto& c : golden["cases"]) {
    const auto expected = c["input_ids"].get<std::vector<int32_t>>();
    INFO("prompt: " << c["prompt"].get<std::string>());
    CHECK(tokenizer.encode(c["prompt"].get<std::string>(), true) == expected);
  }
}

TEST_CASE("Decoding the golden greedy ids gives the reference greedy text", "[tokenizer]") {
  Tokenizer tokenizer(kStoriesModel);
  const auto golden = load_golden();
  for (const auto& c : golden["cases"]) {
    const auto ids = c["greedy_ids"].get<std::vector<int32_t>>();
    CHECK(tokenizer.decode(ids) == c["greedy_text"].get<std::string>());
  }
}

TEST_CASE("Encoding without BOS omits it and decode inverts encode", "[tokenizer]") {
  Tokenizer tokenizer(kLlamaModel);
  CHECK(tokenizer.vocab_size() == 32000);
  CHECK(tokenizer.bos_id() == 1);
  CHECK(tokenizer.eos_id() == 2);
  for (std::string text : {"Hello world", "  two spaces", "héllo 你好 😀 x", "line\n\nbreaks\ttab", ""}) {
    const auto with_bos = tokenizer.encode(text, true);
    const auto without = tokenizer.encode(text, false);
    REQUIRE(!with_bos.empty());
    CHECK(with_bos.front() == 1);
    CHECK(std::vector<int32_t>(with_bos.begin() + 1, with_bos.end()) == without);
    CHECK(tokenizer.decode(with_bos) == text);
  }
  CHECK(tokenizer.encode("Hello world", false) == std::vector<int32_t>{15043, 3186});
}

TEST_CASE("Control token text in a prompt becomes the control token, as Hugging Face reads it", "[tokenizer]") {
  Tokenizer tokenizer(kLlamaModel);
  CHECK(tokenizer.encode("<s>", false) == std::vector<int32_t>{tokenizer.bos_id()});
  const auto ids = tokenizer.encode("hi</s>", false);
  REQUIRE(!ids.empty());
  CHECK(ids.back() == tokenizer.eos_id());
  CHECK(std::vector<int32_t>(ids.begin(), ids.end() - 1) == tokenizer.encode("hi", false));
  // Control tokens are invisible in decoded text.
  CHECK(tokenizer.decode(tokenizer.encode("<s>hi", false)) == "hi");
}

TEST_CASE("id_to_piece maps '▁' to a space and byte pieces to raw bytes", "[tokenizer]") {
  Tokenizer tokenizer(kLlamaModel);
  CHECK(tokenizer.id_to_piece(15043) == " Hello");
  CHECK(tokenizer.id_to_piece(259) == "  ");
  CHECK(tokenizer.id_to_piece(13) == "\n");                // <0x0A>
  CHECK(tokenizer.id_to_piece(231) == std::string("\xE4"));  // <0xE4>
  CHECK(tokenizer.piece_kind(231) == Tokenizer::PieceKind::byte);
  CHECK(tokenizer.id_to_piece(1) == "<s>");
  CHECK(tokenizer.piece_kind(1) == Tokenizer::PieceKind::control);
  CHECK(tokenizer.id_to_piece(0) == "<unk>");
  CHECK(tokenizer.piece_kind(0) == Tokenizer::PieceKind::unknown);
  CHECK_THROWS_AS(tokenizer.id_to_piece(32000), llmk::Error);
  CHECK_THROWS_AS(tokenizer.id_to_piece(-1), llmk::Error);
}

TEST_CASE("Decoding an id outside the vocabulary is an invalid argument", "[tokenizer]") {
  Tokenizer tokenizer(kStoriesModel);
  try {
    tokenizer.decode(std::vector<int32_t>{1, 512});
    FAIL("no exception");
  } catch (const llmk::Error& e) {
    CHECK(e.code() == llmk::ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("512") != std::string::npos);
  }
}

TEST_CASE("Loading a missing or malformed model names the file", "[tokenizer]") {
  const auto missing = std::filesystem::temp_directory_path() / "llmk_no_such_tokenizer.model";
  try {
    Tokenizer t(missing);
    FAIL("no exception");
  } catch (const llmk::Error& e) {
    CHECK(e.code() == llmk::ErrorCode::bad_checkpoint);
    CHECK(std::string(e.what()).find(missing.string()) != std::string::npos);
  }
  const auto garbage = std::filesystem::temp_directory_path() / "llmk_garbage_tokenizer.model";
  {
    std::ofstream out(garbage, std::ios::binary);
    out << "this is not a sentencepiece model";
  }
  try {
    Tokenizer t(garbage);
    FAIL("no exception");
  } catch (const llmk::Error& e) {
    CHECK(e.code() == llmk::ErrorCode::bad_checkpoint);
    CHECK(std::string(e.what()).find(garbage.string()) != std::string::npos);
  }
  std::filesystem::remove(garbage);
}
