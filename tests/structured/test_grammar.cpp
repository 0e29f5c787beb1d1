// Structured outputs' grammar layer (core/grammar.hpp) over real
// vocabularies, against expectations computed here without XGrammar: a
// regex's mask is exactly the set of tokens whose bytes keep the text a
// prefix of a match (brute force over the vocabulary); random walks through a
// JSON schema's masks end in JSON that satisfies the schema; rollback
// restores the masks; refusals name the request field. And the CPU
// sampler's use of a mask (core/token_bitmask.hpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include "core/cpu_sampler.hpp"
#include "core/error.hpp"
#include "core/grammar.hpp"
#include "core/token_bitmask.hpp"
#include "core/tokenizer.hpp"
#include "support/model_cache.hpp"
#include "support/skip.hpp"

using namespace llmk;

namespace {

const std::string kLlamaModel = std::string(LLMK_SHARED_DIR) + "/models/llama2-tokenizer/tokenizer.model";

StructuredOutput spec(GrammarKind kind, std::string text, std::string field = "structured_outputs") {
  return StructuredOutput{kind, std::move(text), std::move(field), nullptr};
}

std::vector<uint32_t> next_mask(GrammarMatcher& m) {
  std::vector<uint32_t> mask(static_cast<size_t>(bitmask_words(m.vocab_size())));
  m.fill_next_mask(mask);
  return mask;
}

bool is_text_token(const Tokenizer& tok, int32_t id) {
  const auto kind = tok.piece_kind(id);
  return (kind == Tokenizer::PieceKind::normal || kind == Tokenizer::PieceKind::byte) && !tok.token_bytes(id).empty();
}

std::vector<int32_t> allowed_ids(std::span<const uint32_t> mask, int32_t vocab) {
  std::vector<int32_t> out;
  for (int32_t id = 0; id < vocab; ++id)
    if (token_allowed(mask, id)) out.push_back(id);
  return out;
}

}  // namespace

TEST_CASE("A regex's mask allows exactly the tokens whose bytes keep the text a prefix of a match", "[grammar]") {
  if (!structured_outputs_available()) LLMK_SKIP(structured_outputs_missing());
  const Tokenizer tok(kLlamaModel);  // sentencepiece with byte fallback: "7", "▁7" and <0x37> all exist
  const int32_t vocab = tok.vocab_size();
  GrammarCompiler compiler(tok, vocab, {tok.eos_id()});
  GrammarMatcher m(compiler.compile(spec(GrammarKind::regex, "[0-9]{3}")));
  std::string text;
  int32_t one_digit = -1;
  for (int step = 0; step <= 3; ++step) {
    INFO("after '" << text << "'");
    const auto mask = next_mask(m);
    std::vector<int32_t> want;
    for (int32_t id = 0; id < vocab; ++id) {
      const std::string& bytes = tok.token_bytes(id);
      const bool digits = is_text_token(tok, id) &&
                          std::all_of(bytes.begin(), bytes.end(), [](char c) { return c >= '0' && c <= '9'; });
      if ((digits && text.size() + bytes.size() <= 3) || (text.size() == 3 && id == tok.eos_id())) want.push_back(id);
    }
    REQUIRE(allowed_ids(mask, vocab) == want);
    if (step == 3) break;
    const auto single = std::find_if(want.begin(), want.end(), [&](int32_t id) { return tok.token_bytes(id).size() == 1; });
    REQUIRE(single != want.end());
    one_digit = *single;
    REQUIRE(m.accept(one_digit));
    text += tok.token_bytes(one_digit);
  }
  CHECK(m.completed());
  CHECK_FALSE(m.accept(one_digit));  // no text past the match
  REQUIRE(m.accept(tok.eos_id()));
  CHECK(m.terminated());
  // Once terminated only the stop token is allowed.
  CHECK(allowed_ids(next_mask(m), vocab) == std::vector<int32_t>{tok.eos_id()});
}

TEST_CASE("Random walks through a JSON schema's masks end in JSON that satisfies it, over two vocabularies",
          "[grammar]") {
  if (!structured_outputs_available()) LLMK_SKIP(structured_outputs_missing());
  std::vector<std::string> files = {kLlamaModel};
  if (std::filesystem::is_regular_file(test::smollm2_file())) files.push_back(test::smollm2_file().string());
  const std::string schema = R"({"type": "object", "properties": {
      "n": {"type": "integer", "minimum": -5, "maximum": 40},
      "ok": {"type": "boolean"},
      "tag": {"enum": ["red", "green"]}},
    "required": ["n", "ok", "tag"]})";
  for (const auto& file : files) {
    INFO(file);
    const Tokenizer tok(file);
    const int32_t vocab = tok.vocab_size();
    GrammarCompiler compiler(tok, vocab, {tok.eos_id()});
    const auto grammar = compiler.compile(spec(GrammarKind::json_schema, schema, "response_format"));
    CHECK(compiler.compile(spec(GrammarKind::json_schema, schema)) == grammar);  // cached by text
    for (uint32_t seed = 1; seed <= 12; ++seed) {
      GrammarMatcher m(grammar);
      std::mt19937 rng(seed);
      std::string text;
      bool stopped = false;
      for (int step = 0; step < 200 && !stopped; ++step) {
        const auto allowed = allowed_ids(next_mask(m), vocab);
        REQUIRE_FALSE(allowed.empty());
        const int32_t id = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
        REQUIRE(m.accept(id));
        if (id == tok.eos_id()) {
          stopped = true;
        } else {
          REQUIRE(is_text_token(tok, id));
          text += tok.token_bytes(id);
        }
      }
      INFO("seed " << seed << ": " << text);
      REQUIRE(stopped);
      const auto value = nlohmann::json::parse(text);
      REQUIRE(value.is_object());
      CHECK(value.size() == 3);
      REQUIRE(value["n"].is_number_integer());
      CHECK(value["n"].get<int>() >= -5);
      CHECK(value["n"].get<int>() <= 40);
      CHECK(value["ok"].is_boolean());
      CHECK((value["tag"] == "red" || value["tag"] == "green"));
    }
  }
}

TEST_CASE("Rolling a matcher back restores the masks it had", "[grammar]") {
  if (!structured_outputs_available()) LLMK_SKIP(structured_outputs_missing());
  const Tokenizer tok(kLlamaModel);
  GrammarCompiler compiler(tok, tok.vocab_size(), {tok.eos_id()});
  // Letters and digits in turn: the allowed tokens change with the position.
  GrammarMatcher m(compiler.compile(spec(GrammarKind::regex, "([a-z]{3}[0-9]{3}){30}")));
  std::vector<std::vector<uint32_t>> masks;
  std::mt19937 rng(3);
  for (int step = 0; step < 6; ++step) {
    masks.push_back(next_mask(m));
    const auto allowed = allowed_ids(masks.back(), tok.vocab_size());
    REQUIRE_FALSE(allowed.empty());
    REQUIRE(m.accept(allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)]));
  }
  CHECK(std::any_of(masks.begin(), masks.end(), [&](const auto& mask) { return mask != masks[0]; }));
  m.rollback(4);
  CHECK(next_mask(m) == masks[2]);
  m.rollback(2);
  CHECK(next_mask(m) == masks[0]);
  // json_object: the text starts with '{' (no free whitespace in compact mode).
  GrammarMatcher object(compiler.compile(spec(GrammarKind::json_object, "")));
  const auto first = allowed_ids(next_mask(object), tok.vocab_size());
  REQUIRE_FALSE(first.empty());
  for (int32_t id : first) CHECK(tok.token_bytes(id).front() == '{');
}

TEST_CASE("A grammar XGrammar refuses, or that no text satisfies, is a FieldError naming the request field",
          "[grammar]") {
  if (!structured_outputs_available()) LLMK_SKIP(structured_outputs_missing());
  const Tokenizer tok(kLlamaModel);
  GrammarCompiler compiler(tok, tok.vocab_size(), {tok.eos_id()});
  const std::vector<StructuredOutput> bad = {
      spec(GrammarKind::json_schema, R"({"type": "objekt"})", "response_format.json_schema.schema"),
      spec(GrammarKind::json_schema, R"({"type": "integer", "minimum": 5, "maximum": 1})", "guided_json"),
      spec(GrammarKind::json_schema, "{not json", "structured_outputs.json"),
      spec(GrammarKind::regex, "a((", "structured_outputs.regex"),
      spec(GrammarKind::ebnf, R"(root ::= ("a")", "guided_grammar"),
      spec(GrammarKind::ebnf, "root ::= undefined_rule", "structured_outputs.grammar"),
  };
  for (const auto& s : bad) {
    INFO(s.text);
    try {
      compiler.compile(s);
      FAIL("compiled");
    } catch (const FieldError& e) {
      CHECK(e.field() == s.field);
      CHECK(e.code() == ErrorCode::invalid_argument);
      CHECK(std::string(e.what()).rfind(s.field + ": ", 0) == 0);
      CHECK(std::string(e.what()).size() > s.field.size() + 8);  // with XGrammar's reason
    }
  }
}

TEST_CASE("Without XGrammar every grammar is refused as unsupported, naming what is missing", "[grammar]") {
  if (structured_outputs_available()) LLMK_SKIP("this build has XGrammar");
  const Tokenizer tok(kLlamaModel);
  CHECK_THROWS_WITH(GrammarCompiler(tok, tok.vocab_size(), {tok.eos_id()}),
                    Catch::Contains("XGrammar") && Catch::Contains("scripts/setup.sh"));
}

TEST_CASE("A token bitmask keeps the allowed logits and sets the others, and ids past it, to -inf", "[grammar]") {
  constexpr int32_t vocab = 77;
  std::mt19937 rng(5);
  std::vector<float> logits(vocab);
  for (auto& v : logits) v = std::uniform_real_distribution<float>(-4, 4)(rng);
  std::vector<uint32_t> mask = {0xFFFFFFFFu, 0u, 0x80000001u};  // 0..31, 64, 95 (past the vocabulary)
  for (size_t words : {size_t{3}, size_t{2}}) {
    std::vector<float> out(vocab);
    apply_token_bitmask(logits.data(), vocab, std::span<const uint32_t>(mask.data(), words), out.data());
    for (int32_t id = 0; id < vocab; ++id) {
      const bool allowed = id < 32 || (id == 64 && words == 3);
      CHECK(token_allowed(std::span<const uint32_t>(mask.data(), words), id) == allowed);
      if (allowed)
        CHECK(out[id] == logits[id]);
      else
        CHECK(out[id] == -std::numeric_limits<float>::infinity());
    }
  }
}

TEST_CASE("The CPU sampler takes only tokens a row's bitmask allows, greedy and sampled", "[grammar]") {
  constexpr int32_t vocab = 300;
  std::vector<float> logits(vocab);
  for (int32_t i = 0; i < vocab; ++i) logits[i] = static_cast<float>(i % 17) * 0.3f;  // best: ids 16, 33, ...
  std::vector<uint32_t> mask(static_cast<size_t>(bitmask_words(vocab)), 0u);
  const std::vector<int32_t> allowed = {3, 40, 41, 250};
  for (int32_t id : allowed) mask[static_cast<size_t>(id / 32)] |= 1u << (id % 32);
  CpuSampler sampler(vocab, 1);
  SamplingParams greedy;
  greedy.temperature = 0;
  SamplingParams sampled;
  sampled.temperature = 1.5f;
  sampler.open(1, greedy, 1, {}, 1);
  sampler.open(2, sampled, 9, {}, 1);
  LogitsView view;
  view.data = logits.data();
  view.vocab_size = vocab;
  view.row_stride = vocab;
  view.num_rows = 1;
  std::vector<SampledToken> out(1);
  DeviceSampler::Row row{1, 0, 0};
  row.token_bitmask = mask;
  sampler.sample(view, std::span(&row, 1), out);
  CHECK(out[0].token_id == 250);  // 250 % 17 = 12, the best of the allowed
  for (int32_t g = 0; g < 200; ++g) {
    DeviceSampler::Row r{2, 0, g};
    r.token_bitmask = mask;
    sampler.sample(view, std::span(&r, 1), out);
    CHECK(std::find(allowed.begin(), allowed.end(), out[0].token_id) != allowed.end());
  }
}
