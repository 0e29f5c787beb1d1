// A model whose vocabulary is padded past its tokenizer (as Qwen2.5's
// 151936 rows for 151665 tokens): the padding ids are never sampled and
// never listed as logprob alternatives, even where their logits win.
//
// The model is stories260K with 88 extra rows: embeddings of zeros, and
// lm_head rows of +-20 times real tokens' rows, so a padding logit is 20
// times a real logit's magnitude. The golden file's float64 logits show that
// one of them beats every real token after each golden prompt; the engine
// must still give exactly the unpadded model's golden greedy ids, and a
// sampled request must give what the unpadded model gives for its seed.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "../core/safetensors_writer.hpp"
#include "actors/engine.hpp"
#include "core/checkpoint.hpp"
#include "core/tokenizer.hpp"
#include "engine_fixture.hpp"

namespace {

using namespace llmk;
namespace fs = std::filesystem;

constexpr int32_t kRealVocab = 512;
constexpr int32_t kPaddedVocab = 600;
constexpr float kScale = 20.0f;

// The real token whose row padding row `p` copies, and the copy's sign.
int32_t source_token(int32_t p) { return 3 + 11 * ((p - kRealVocab) / 2); }
float source_sign(int32_t p) { return (p - kRealVocab) % 2 == 0 ? kScale : -kScale; }

// Writes the padded copy of stories260K into `dir`.
void write_padded_model(const fs::path& dir) {
  const fs::path source = LLMK_SHARED_DIR "/models/stories260K";
  const std::unique_ptr<Checkpoint> ckpt = load_checkpoint(source);
  const int64_t hidden = ckpt->config().hidden_size;
  std::vector<test::TensorSpec> tensors;
  for (const auto& [name, view] : ckpt->tensors()) {
    REQUIRE(view.dtype == DType::f32);
    test::TensorSpec t{name, "F32", view.shape, std::string(static_cast<const char*>(view.data), view.nbytes())};
    if (name == "model.embed_tokens.weight") {
      const auto* rows = static_cast<const float*>(view.data);
      std::vector<float> embed(static_cast<size_t>(kPaddedVocab * hidden), 0.0f);
      std::memcpy(embed.data(), rows, view.nbytes());
      std::vector<float> head = embed;
      for (int32_t p = kRealVocab; p < kPaddedVocab; ++p)
        for (int64_t j = 0; j < hidden; ++j)
          head[static_cast<size_t>(p * hidden + j)] = source_sign(p) * rows[source_token(p) * hidden + j];
      auto bytes = [](const std::vector<float>& v) {
        return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
      };
      t.shape = {kPaddedVocab, hidden};
      t.data = bytes(embed);
      tensors.push_back({"lm_head.weight", "F32", {kPaddedVocab, hidden}, bytes(head)});
    }
    tensors.push_back(std::move(t));
  }
  test::write_safetensors(dir / "model.safetensors", tensors);
  nlohmann::json config = nlohmann::json::parse(test::read_file(source / "config.json"));
  config["vocab_size"] = kPaddedVocab;
  config["tie_word_embeddings"] = false;
  test::write_config_json(dir, config);
  for (const char* file : {"tokenizer.model", "tokenizer_config.json", "generation_config.json"})
    fs::copy_file(source / file, dir / file);
}

EngineConfig config_for(const fs::path& model) {
  EngineConfig cfg = test::stories_config();
  cfg.model.path = model.string();
  return cfg;
}

}  // namespace

TEST_CASE("a padded vocabulary's ids are never sampled nor listed as logprobs, though their logits win",
          "[engine][vocab]") {
  test::TempDir dir;
  write_padded_model(dir.path());
  const auto golden = test::load_golden();
  REQUIRE(!golden.empty());
  Engine padded(config_for(dir.path()));
  REQUIRE(padded.model_config().vocab_size == kPaddedVocab);
  REQUIRE(padded.tokenizer().vocab_size() == kRealVocab);

  for (size_t i = 0; i < golden.size(); ++i) {
    const test::GoldenCase& g = golden[i];
    INFO("golden case " << i << ": " << g.prompt);
    // The premise: after the prompt a padding logit beats every real one.
    const float best_real = *std::max_element(g.last_logits.begin(), g.last_logits.end());
    float best_padding = -INFINITY;
    for (int32_t p = kRealVocab; p < kPaddedVocab; ++p)
      best_padding = std::max(best_padding, source_sign(p) * g.last_logits[static_cast<size_t>(source_token(p))]);
    REQUIRE(best_padding > best_real + 1.0f);

    const test::RequestResult r = test::run_one(padded, test::golden_request(g, "greedy" + std::to_string(i)));
    CHECK(r.sample().error.empty());
    CHECK(r.sample().token_ids == g.greedy_ids);
  }

  // Sampled, with logprobs: the same ids and alternatives as the unpadded model.
  Engine plain(test::stories_config());
  Request r;
  r.prompt = "Once upon a time";
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 7;
  r.sampling.max_tokens = 24;
  r.sampling.logprobs = 5;
  r.id = "sampled";
  const test::RequestResult got = test::run_one(padded, r);
  const test::RequestResult want = test::run_one(plain, r);
  INFO(got.sample().error);
  REQUIRE(got.sample().error.empty());
  CHECK(got.sample().token_ids == want.sample().token_ids);
  REQUIRE(got.sample().logprobs.size() == got.sample().token_ids.size());
  REQUIRE(want.sample().logprobs.size() == got.sample().logprobs.size());
  for (size_t t = 0; t < got.sample().logprobs.size(); ++t) {
    const TokenLogprob& a = got.sample().logprobs[t];
    const TokenLogprob& b = want.sample().logprobs[t];
    CHECK(a.token_id < kRealVocab);
    REQUIRE(a.top.size() == 5);
    REQUIRE(b.top.size() == 5);
    for (size_t k = 0; k < a.top.size(); ++k) {
      CHECK(a.top[k].first < kRealVocab);
      CHECK(a.top[k].first == b.top[k].first);
      CHECK(a.top[k].second == Approx(b.top[k].second).margin(1e-4));
    }
  }
}
