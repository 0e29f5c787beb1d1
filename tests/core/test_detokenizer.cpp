// IncrementalDetokenizer: streamed deltas concatenate to Tokenizer::decode
// and never contain broken UTF-8.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/tokenizer.hpp"

using llmk::IncrementalDetokenizer;
using llmk::Tokenizer;

namespace {

const std::string kShared = LLMK_SHARED_DIR;
const std::string kStoriesModel = kShared + "/models/stories260K/tokenizer.model";
const std::string kLlamaModel = kShared + "/models/llama2-tokenizer/tokenizer.model";

// An independent UTF-8 validator (RFC 3629): decodes each code point and
// checks it is in range, not a surrogate and not overlong.
bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    int n;
    uint32_t cp;
    if (b0 < 0x80) {
      n = 1, cp = b0;
    } else if ((b0 >> 5) == 0x6) {
      n = 2, cp = b0 & 0x1F;
    } else if ((b0 >> 4) == 0xE) {
      n = 3, cp = b0 & 0x0F;
    } else if ((b0 >> 3) == 0x1E) {
      n = 4, cp = b0 & 0x07;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (int k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b >> 6) != 0x2) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    static const uint32_t min_for_length[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_for_length[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

struct Streamed {
  std::string text;
  bool all_valid = true;
  size_t max_pending = 0;
};

Streamed stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool continues_prompt) {
  IncrementalDetokenizer detok(tokenizer, continues_prompt);
  Streamed out;
  for (int32_t id : ids) {
    const std::string delta = detok.push(id);
    out.all_valid = out.all_valid && valid_utf8(delta);
    out.max_pending = std::max(out.max_pending, detok.num_pending_bytes());
    out.text += delta;
  }
  const std::string rest = detok.flush();
  out.all_valid = out.all_valid && valid_utf8(rest);
  out.text += rest;
  CHECK(detok.text() == out.text);
  return out;
}

std::vector<int32_t> concat(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int32_t> out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

}  // namespace

TEST_CASE("The UTF-8 validator of the tests agrees with llmk::is_valid_utf8", "[detokenizer]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20000; ++trial) {
    std::string s(rng() % 5, '\0');
    for (auto& c : s) c = static_cast<char>(trial % 2 ? 0x80 + rng() % 0x80 : rng() % 256);
    INFO("trial " << trial);
    REQUIRE(valid_utf8(s) == llmk::is_valid_utf8(s));
  }
  CHECK(valid_utf8("héllo 你好 😀"));
  CHECK_FALSE(valid_utf8("\xED\xA0\x80"));  // surrogate
  CHECK_FALSE(valid_utf8("\xC0\x80"));      // overlong
  CHECK_FALSE(valid_utf8("\xE4\xBD"));      // truncated
}

TEST_CASE("Streaming text with emoji, CJK, accents and a leading space matches decode", "[detokenizer]") {
  Tokenizer tokenizer(kLlamaModel);
  const std::vector<std::string> texts = {
      " leading space: café, naïve, Ångström, Zürich",
      "你好，世界！这是一个测试。日本語のテキストも。",
      "Emoji 😀🎉👍🏽 and a family 👨‍👩‍👧 and flags 🇫🇷",
      "mixed: é😀你 ü\n\ttabs  and   spaces ",
      "  two leading spaces",
      "\n starts with a newline",
  };
  for (const auto& text : texts) {
    INFO("text: " << text);
    const auto ids = tokenizer.encode(text, true);
    const Streamed s = stream(tokenizer, ids, false);
    CHECK(s.all_valid);
    CHECK(s.text == tokenizer.decode(ids));
    CHECK(s.max_pending <= 3);
  }
}

TEST_CASE("A multi-byte character made of byte pieces is held back until complete", "[detokenizer]") {
  Tokenizer tokenizer(kLlamaModel);
  const auto ids = tokenizer.encode("😀", false);  // ▁ <0xF0> <0x9F> <0x98> <0x80>
  REQUIRE(ids.size() == 5);
  IncrementalDetokenizer detok(tokenizer, true);
  CHECK(detok.push(ids[0]) == " ");
  CHECK(detok.push(ids[1]).empty());
  CHECK(detok.push(ids[2]).empty());
  CHECK(detok.push(ids[3]).empty());
  CHECK(detok.num_pending_bytes() == 3);
  CHECK(detok.push(ids[4]) == "😀");
  CHECK(detok.flush().empty());
}

TEST_CASE("Random id sequences rich in byte pieces stream to exactly decode's text", "[detokenizer]") {
  // Byte pieces in the Llama 2 vocabulary are ids 3..258; mixing them with
  // control, unknown and ordinary pieces exercises invalid and truncated
  // sequences, which must become U+FFFD exactly as sentencepiece does.
  Tokenizer tokenizer(kLlamaModel);
  const auto prompt = tokenizer.encode("Hello", true);
  std::mt19937 rng(12345);
  const std::vector<int32_t> utf8_leads = {3 + 0xC3, 3 + 0xE4, 3 + 0xF0, 3 + 0xED, 3 + 0xE0, 3 + 0xF4};
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<int32_t> ids(1 + rng() % 12);
    for (auto& id : ids) {
      const int r = static_cast<int>(rng() % 10);
      if (r < 3) id = utf8_leads[rng() % utf8_leads.size()];
      else if (r < 6) id = 3 + 0x80 + static_cast<int32_t>(rng() % 0x40);  // continuation bytes
      else if (r < 7) id = 3 + static_cast<int32_t>(rng() % 256);
      else if (r < 8) id = static_cast<int32_t>(rng() % 3);             // <unk> <s> </s>
      else id = 259 + static_cast<int32_t>(rng() % (32000 - 259));
    }
    INFO("trial " << trial);
    const Streamed alone = stream(tokenizer, ids, false);
    REQUIRE(alone.all_valid);
    REQUIRE(alone.text == tokenizer.decode(ids));
    REQUIRE(alone.max_pending <= 3);
    const std::string with_prompt = tokenizer.decode(concat(prompt, ids));
    const std::string prompt_text = tokenizer.decode(prompt);
    REQUIRE(with_prompt.compare(0, prompt_text.size(), prompt_text) == 0);
    REQUIRE(stream(tokenizer, ids, true).text == with_prompt.substr(prompt_text.size()));
  }
}

TEST_CASE("Continuing a prompt keeps the first token's leading space as decode(prompt + ids) does",
          "[detokenizer]") {
  Tokenizer tokenizer(kStoriesModel);
  std::ifstream in(kShared + "/golden/stories260K.json");
  const auto golden = nlohmann::json::parse(in);
  for (const auto& c : golden["cases"]) {
    const auto prompt = c["input_ids"].get<std::vector<int32_t>>();
    const auto generated = c["greedy_ids"].get<std::vector<int32_t>>();
    INFO("prompt: " << c["prompt"].get<std::string>());
    // Alone: the golden greedy text, first space dropped.
    CHECK(stream(tokenizer, generated, false).text == c["greedy_text"].get<std::string>());
    // After the prompt: the difference of the two decodes. A prompt of BOS
    // alone has no visible piece, so the space is dropped there as well.
    const std::string prompt_text = tokenizer.decode(prompt);
    const std::string full = tokenizer.decode(concat(prompt, generated));
    REQUIRE(full.compare(0, prompt_text.size(), prompt_text) == 0);
    IncrementalDetokenizer detok(tokenizer, std::span<const int32_t>(prompt));
    std::string text;
    for (int32_t id : generated) text += detok.push(id);
    text += detok.flush();
    CHECK(text == full.substr(prompt_text.size()));
  }
}

TEST_CASE("Only the first visible piece loses its space; control tokens before it do not count",
          "[detokenizer]") {
  Tokenizer tokenizer(kLlamaModel);
  const int32_t world = 3186, space = 29871;  // "▁world", "▁"
  CHECK(stream(tokenizer, {1, 2, world, world}, false).text == "world world");
  CHECK(stream(tokenizer, {space, world}, false).text == " world");
  CHECK(stream(tokenizer, {3 + 0x20, world}, false).text == "  world");  // a byte piece is visible
  CHECK(stream(tokenizer, {0, world}, false).text == " \xE2\x81\x87  world");
  CHECK(stream(tokenizer, {world}, true).text == " world");
}
