// tokenizer.json without the venv: a hand-made file whose ids follow from
// its merges by hand, and malformed or unsupported files, each refused with
// an error that names the JSON path and the value.
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "core/tokenizer.hpp"
#include "tokenizer_json_fixtures.hpp"

using llmk::Tokenizer;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A byte-level BPE over the letters of "lower", "low", "newest" with a
// Llama-3-like pipeline.
json tiny_tokenizer() {
  json vocab = json::object();
  int id = 0;
  for (const char* s : {"l", "o", "w", "e", "r", "n", "s", "t", "\xC4\xA0" /* Ġ = ' ' */, "lo", "low", "er", "lower",
                        "\xC4\xA0n", "ne", "es", "est"})
    vocab[s] = id++;
  return json{
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array({json{{"id", id}, {"content", "<|eot|>"}, {"special", true}, {"normalized", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       json{{"type", "Sequence"},
            {"pretokenizers",
             json::array({json{{"type", "Split"},
                               {"pattern", json{{"Regex", R"( ?\p{L}+|\s+)"}}},
                               {"behavior", "Isolated"},
                               {"invert", false}},
                          json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
      {"post_processor", nullptr},
      {"decoder", json{{"type", "ByteLevel"}}},
      {"model", json{{"type", "BPE"},
                     {"vocab", vocab},
                     // "l o" ranks first; "ne" before "es"; [a, b] pairs and "a b" strings mixed.
                     {"merges", json::array({"l o", "lo w", json::array({"e", "r"}), "low er", "n e", "e s", "es t"})}}},
  };
}

fs::path write_json(const fs::path& dir, const json& j) {
  std::ofstream(dir / "tokenizer.json") << j.dump();
  return dir / "tokenizer.json";
}

// Loads `j` and returns the error message (fails the test when it loads).
std::string load_error(const json& j) {
  const fs::path dir = llmk::test::make_temp_dir("llmk_tokenizer_json");
  std::string message;
  try {
    Tokenizer t(write_json(dir, j));
    FAIL("loaded without an error");
  } catch (const llmk::Error& e) {
    CHECK(e.code() == llmk::ErrorCode::bad_checkpoint);
    message = e.what();
  }
  fs::remove_all(dir);
  return message;
}

}  // namespace

TEST_CASE("A hand-made byte-level tokenizer.json applies its merges by rank", "[tokenizer_json]") {
  const fs::path dir = llmk::test::make_temp_dir("llmk_tokenizer_json");
  Tokenizer t(write_json(dir, tiny_tokenizer()));
  // "lower": l o -> lo, lo w -> low, e r -> er, low er -> lower.
  CHECK(t.encode("lower", false) == std::vector<int32_t>{12});
  // " newest": Ġ n e w e s t; "n e" (rank 4) before "e s" (rank 5), then "es t";
  // "Ġn" has no merge here, so Ġ stays alone.
  CHECK(t.encode(" newest", false) == std::vector<int32_t>{8, 14, 2, 16});
  CHECK(t.encode("low<|eot|>lower", false) == std::vector<int32_t>{10, 17, 12});
  CHECK(t.decode(std::vector<int32_t>{10, 17, 8, 12}) == "low lower");
  CHECK(t.vocab_size() == 18);
  CHECK(t.piece_kind(17) == Tokenizer::PieceKind::control);
  CHECK(t.decode_rules().byte_errors == Tokenizer::ByteErrors::lossy);
  fs::remove_all(dir);
}

TEST_CASE("Unsupported or malformed tokenizer.json parts are errors naming the JSON path and value",
          "[tokenizer_json]") {
  auto j = tiny_tokenizer();
  j["model"]["type"] = "WordPiece";
  auto m = load_error(j);
  CHECK_THAT(m, Catch::Contains("/model/type") && Catch::Contains("WordPiece") && Catch::Contains("tokenizer.json"));

  j = tiny_tokenizer();
  j["normalizer"] = json{{"type", "Lowercase"}};
  CHECK_THAT(load_error(j), Catch::Contains("/normalizer/type") && Catch::Contains("Lowercase"));

  j = tiny_tokenizer();
  j["pre_tokenizer"]["pretokenizers"][1] = json{{"type", "Whitespace"}};
  CHECK_THAT(load_error(j), Catch::Contains("/pre_tokenizer/pretokenizers/1/type") && Catch::Contains("Whitespace"));

  j = tiny_tokenizer();
  j["pre_tokenizer"]["pretokenizers"][0] = json{{"type", "Digits"}, {"individual_digits", "yes"}};
  CHECK_THAT(load_error(j), Catch::Contains("/pre_tokenizer/pretokenizers/0/individual_digits") &&
                                Catch::Contains("yes"));

  j = tiny_tokenizer();
  j["pre_tokenizer"]["pretokenizers"][1] = json{{"type", "Metaspace"}, {"replacement", "ab"}};
  CHECK_THAT(load_error(j), Catch::Contains("/pre_tokenizer/pretokenizers/1/replacement") && Catch::Contains("'ab'"));

  j = tiny_tokenizer();
  j["pre_tokenizer"]["pretokenizers"][1] =
      json{{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "sometimes"}};
  CHECK_THAT(load_error(j), Catch::Contains("/pre_tokenizer/pretokenizers/1/prepend_scheme") &&
                                Catch::Contains("sometimes"));

  j = tiny_tokenizer();
  j["decoder"] = json{{"type", "Sequence"},
                      {"decoders", json::array({json{{"type", "Metaspace"}, {"replacement", "_"}},
                                                json{{"type", "Fuse"}},
                                                json{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  CHECK_THAT(load_error(j), Catch::Contains("/decoder/decoders/2") && Catch::Contains("Strip"));

  j = tiny_tokenizer();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  CHECK_THAT(load_error(j), Catch::Contains("/pre_tokenizer/pretokenizers/0/behavior") && Catch::Contains("Removed"));

  j = tiny_tokenizer();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  CHECK_THAT(load_error(j), Catch::Contains("/pre_tokenizer/pretokenizers/0/pattern/Regex") &&
                                Catch::Contains("(unclosed"));

  j = tiny_tokenizer();
  j["decoder"] = json{{"type", "WordPiece"}};
  CHECK_THAT(load_error(j), Catch::Contains("/decoder/type") && Catch::Contains("WordPiece"));

  j = tiny_tokenizer();
  j["decoder"] = nullptr;
  CHECK_THAT(load_error(j), Catch::Contains("/decoder"));

  j = tiny_tokenizer();
  j["post_processor"] = json{{"type", "RobertaProcessing"}};
  CHECK_THAT(load_error(j), Catch::Contains("/post_processor/type") && Catch::Contains("RobertaProcessing"));

  j = tiny_tokenizer();
  j["model"]["merges"][2] = "x y";
  CHECK_THAT(load_error(j), Catch::Contains("/model/merges/2") && Catch::Contains("'x'"));

  j = tiny_tokenizer();
  j["model"]["merges"][0] = "l o w";
  CHECK_THAT(load_error(j), Catch::Contains("/model/merges/0") && Catch::Contains("l o w"));

  j = tiny_tokenizer();
  j["model"]["vocab"]["l"] = "zero";
  CHECK_THAT(load_error(j), Catch::Contains("/model/vocab/l") && Catch::Contains("zero"));

  j = tiny_tokenizer();
  j["model"].erase("vocab");
  CHECK_THAT(load_error(j), Catch::Contains("/model/vocab") && Catch::Contains("missing"));

  j = tiny_tokenizer();
  j["added_tokens"][0].erase("id");
  CHECK_THAT(load_error(j), Catch::Contains("/added_tokens/0/id"));

  j = tiny_tokenizer();
  j["truncation"] = json{{"max_length", 8}};
  CHECK_THAT(load_error(j), Catch::Contains("/truncation"));

  // An id far past the tokens the file names (the engine keeps a row per id
  // up to the largest) is refused, naming the id, not sized into gigabytes.
  j = tiny_tokenizer();
  j["model"]["vocab"]["l"] = 2000000000;
  CHECK_THAT(load_error(j), Catch::Contains("/model/vocab/l") && Catch::Contains("2000000000"));
  j = tiny_tokenizer();
  j["added_tokens"][0]["id"] = 1 << 30;
  CHECK_THAT(load_error(j), Catch::Contains("/added_tokens/0/id") && Catch::Contains(std::to_string(1 << 30)));
  // A few unnamed ids (reserved ranges) are fine.
  j = tiny_tokenizer();
  j["added_tokens"][0]["id"] = 1000;
  const fs::path dir = llmk::test::make_temp_dir("llmk_tokenizer_json");
  CHECK_NOTHROW(Tokenizer(write_json(dir, j)));
  fs::remove_all(dir);
}

TEST_CASE("A tokenizer.json that is not JSON is refused with the file named", "[tokenizer_json]") {
  const fs::path dir = llmk::test::make_temp_dir("llmk_tokenizer_json");
  std::ofstream(dir / "tokenizer.json") << "{\"model\": ";
  try {
    Tokenizer t(dir / "tokenizer.json");
    FAIL("loaded");
  } catch (const llmk::Error& e) {
    CHECK(e.code() == llmk::ErrorCode::bad_checkpoint);
    CHECK_THAT(std::string(e.what()), Catch::Contains("tokenizer.json") && Catch::Contains("not valid JSON"));
  }
  fs::remove_all(dir);
}
