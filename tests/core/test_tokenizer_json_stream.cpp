// Streaming with tokenizer.json: after every token, the text streamed so far
// plus what a flush would release equals decode() of the ids so far, and no
// delta holds broken UTF-8 (byte-level tokens may end mid-character).
#include <catch2/catch.hpp>

#include "core/tokenizer.hpp"
#include "support/skip.hpp"
#include "tokenizer_json_fixtures.hpp"

using llmk::IncrementalDetokenizer;
using llmk::Tokenizer;
namespace fs = std::filesystem;
namespace t = llmk::test;

namespace {

// Streams `ids` and checks every prefix against decode().
void check_every_prefix(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  IncrementalDetokenizer detok(tokenizer, false);
  std::string streamed;
  for (size_t k = 0; k < ids.size(); ++k) {
    const std::string delta = detok.push(ids[k]);
    REQUIRE(llmk::is_valid_utf8(delta));
    streamed += delta;
    IncrementalDetokenizer copy = detok;  // flushing a copy leaves the stream as it is
    const std::string rest = copy.flush();
    REQUIRE(llmk::is_valid_utf8(rest));
    const std::vector<int32_t> prefix(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k) + 1);
    INFO("prefix " << nlohmann::json(prefix).dump());
    REQUIRE(streamed + rest == tokenizer.decode(prefix));
  }
  CHECK(detok.text() == streamed);
}

std::vector<std::vector<int32_t>> random_ids(const Tokenizer& tokenizer, int count) {
  std::vector<int32_t> bytes;  // pieces that are not whole characters, to break UTF-8
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.piece_kind(id) == Tokenizer::PieceKind::byte && !llmk::is_valid_utf8(tokenizer.id_to_piece(id)))
      bytes.push_back(id);
  }
  std::mt19937 rng(2024);
  std::vector<std::vector<int32_t>> lists;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> ids(1 + rng() % 10);
    for (auto& id : ids)
      id = (rng() % 3 && !bytes.empty()) ? bytes[rng() % bytes.size()] : static_cast<int32_t>(rng() % tokenizer.vocab_size());
    lists.push_back(ids);
  }
  return lists;
}

void check_streaming(const fs::path& file) {
  Tokenizer tokenizer(file);
  for (const auto& text : t::varied_corpus()) {
    INFO("text: " << nlohmann::json(text).dump());
    check_every_prefix(tokenizer, tokenizer.encode(text, true));
  }
  for (const auto& ids : random_ids(tokenizer, 1500)) check_every_prefix(tokenizer, ids);
}

}  // namespace

TEST_CASE("Streaming a Llama-3-style tokenizer.json gives decode's text after every token, in valid UTF-8",
          "[tokenizer_json]") {
  const auto dir = t::fixtures_dir();
  if (!dir) LLMK_SKIP("no project venv with tokenizers");
  check_streaming(*dir / "llama3" / "tokenizer.json");
}

TEST_CASE("Streaming a Qwen2-style tokenizer.json gives decode's text after every token, in valid UTF-8",
          "[tokenizer_json]") {
  const auto dir = t::fixtures_dir();
  if (!dir) LLMK_SKIP("no project venv with tokenizers");
  check_streaming(*dir / "qwen2" / "tokenizer.json");
}

TEST_CASE("Streaming Llama 2's tokenizer.json gives decode's text after every token, in valid UTF-8",
          "[tokenizer_json]") {
  const auto dir = t::fixtures_dir();
  if (!dir) LLMK_SKIP("no project venv with tokenizers");
  check_streaming(*dir / "llama2" / "tokenizer.json");
}

TEST_CASE("A byte-level token ending mid-character is held back until the character is complete",
          "[tokenizer_json]") {
  const auto dir = t::fixtures_dir();
  if (!dir) LLMK_SKIP("no project venv with tokenizers");
  Tokenizer tokenizer(*dir / "llama3" / "tokenizer.json");
  // A rare four-byte character: the fixture has no token for it, so BPE
  // leaves it in pieces that are not characters.
  const auto ids = tokenizer.encode("\U0001F9EC", false);
  REQUIRE(ids.size() >= 2);
  IncrementalDetokenizer detok(tokenizer, false);
  for (size_t k = 0; k + 1 < ids.size(); ++k) CHECK(detok.push(ids[k]).empty());
  CHECK(detok.num_pending_bytes() > 0);
  CHECK(detok.push(ids.back()) == "\U0001F9EC");
  // Cut off, the held bytes become one U+FFFD (one maximal invalid sequence).
  IncrementalDetokenizer cut(tokenizer, false);
  cut.push(ids[0]);
  CHECK(cut.flush() == "\xEF\xBF\xBD");
}

TEST_CASE("Streaming Metaspace tokenizer.json files gives decode's text after every token, in valid UTF-8",
          "[tokenizer_json][detokenizer]") {
  const auto dir = t::fixtures_dir();
  if (!dir) LLMK_SKIP("no project venv with tokenizers");
  for (const char* name : {"metaspace_always_split", "metaspace_first_nosplit", "metaspace_never_split",
                           "llama2_metaspace", "llama2_flags"}) {
    INFO(name);
    check_streaming(*dir / name / "tokenizer.json");
  }
}
