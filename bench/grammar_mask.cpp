// Structured outputs' cost per token (docs/structured_outputs.md), apart
// from the forward: for a batch of samples walking a JSON schema over a real
// vocabulary,
//   matcher   accept the sampled token and fill the next mask (XGrammar),
//             the work the sampler actor overlaps with the next forward;
//   sample    the CPU sampler's step with the masks applied, against the
//             same step without them (greedy and temperature 0.8 / top-p 0.9).
// Each sample walks its own path through the grammar (random allowed
// tokens, seeded), restarting when it completes.
//   bench_grammar_mask [tokenizer file (default: SmolLM2's GGUF in the model cache)] [batch=32] [steps=200]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_sampler.hpp"
#include "core/grammar.hpp"
#include "core/token_bitmask.hpp"
#include "core/tokenizer.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

std::string default_tokenizer() {
  const char* cache = std::getenv("LLMK_MODEL_CACHE");
  const char* home = std::getenv("HOME");
  const std::filesystem::path root = cache && *cache ? std::filesystem::path(cache)
                                                     : std::filesystem::path(home ? home : "") / ".cache" / "llmk";
  return (root / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").string();
}

const char* kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 24},
  "age": {"type": "integer", "minimum": 0, "maximum": 120},
  "tags": {"type": "array", "items": {"enum": ["a", "bb", "ccc"]}, "maxItems": 4},
  "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16},
                                               "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
              "required": ["city", "zip"]}},
  "required": ["name", "age", "tags", "address"]})";

}  // namespace

int main(int argc, char** argv) {
  if (!llmk::structured_outputs_available()) {
    std::fprintf(stderr, "%s\n", llmk::structured_outputs_missing());
    return 1;
  }
  const std::string file = argc > 1 ? argv[1] : default_tokenizer();
  const int32_t batch = argc > 2 ? std::atoi(argv[2]) : 32;
  const int32_t steps = argc > 3 ? std::atoi(argv[3]) : 200;
  const llmk::Tokenizer tok(file);
  const int32_t vocab = tok.vocab_size();
  llmk::GrammarCompiler compiler(tok, vocab, {tok.eos_id()});
  auto start = Clock::now();
  const auto grammar = compiler.compile({llmk::GrammarKind::json_schema, kSchema, "bench", nullptr});
  std::printf("tokenizer %s: %d tokens; schema compiled in %.1f ms\n", file.c_str(), vocab, us_since(start) / 1000);

  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(vocab) * batch);
  for (auto& v : logits) v = normal(rng);
  llmk::LogitsView view;
  view.data = logits.data();
  view.num_rows = batch;
  view.vocab_size = vocab;
  view.row_stride = vocab;

  std::vector<llmk::GrammarMatcher> matchers;
  std::vector<std::vector<uint32_t>> masks(static_cast<size_t>(batch),
                                           std::vector<uint32_t>(static_cast<size_t>(llmk::bitmask_words(vocab))));
  for (int32_t i = 0; i < batch; ++i) {
    matchers.emplace_back(grammar);
    matchers.back().fill_next_mask(masks[static_cast<size_t>(i)]);
  }
  for (const char* mode : {"greedy", "sampled"}) {
    llmk::SamplingParams params;
    if (std::string(mode) == "greedy") {
      params.temperature = 0;
    } else {
      params.temperature = 0.8f;
      params.top_p = 0.9f;
    }
    llmk::CpuSampler plain(vocab, 1), masked(vocab, 1);
    for (int32_t i = 0; i < batch; ++i) {
      plain.open(static_cast<uint64_t>(i), params, 7, {}, 1);
      masked.open(static_cast<uint64_t>(i), params, 7, {}, 1);
    }
    std::vector<llmk::DeviceSampler::Row> rows(static_cast<size_t>(batch));
    std::vector<llmk::SampledToken> out(static_cast<size_t>(batch));
    double plain_us = 0, masked_us = 0, matcher_us = 0;
    for (int32_t s = 0; s < steps; ++s) {
      for (int32_t i = 0; i < batch; ++i) rows[static_cast<size_t>(i)] = {static_cast<uint64_t>(i), 0, s};
      start = Clock::now();
      plain.sample(view, rows, out);
      plain_us += us_since(start);
      for (int32_t i = 0; i < batch; ++i) rows[static_cast<size_t>(i)].token_bitmask = masks[static_cast<size_t>(i)];
      start = Clock::now();
      masked.sample(view, rows, out);
      masked_us += us_since(start);
      // The walk goes on with a random allowed token (the random logits
      // would keep choosing the same few); the matcher's cost is timed.
      for (int32_t i = 0; i < batch; ++i) {
        auto& mask = masks[static_cast<size_t>(i)];
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < vocab; ++id)
          if (llmk::token_allowed(mask, id)) allowed.push_back(id);
        const int32_t id = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
        auto& m = matchers[static_cast<size_t>(i)];
        start = Clock::now();
        m.accept(id);
        if (m.terminated()) m = llmk::GrammarMatcher(grammar);
        m.fill_next_mask(mask);
        matcher_us += us_since(start);
      }
    }
    const double tokens = static_cast<double>(batch) * steps;
    std::printf("batch %d, %s: sample %.1f us/token plain, %.1f masked (+%.1f); matcher accept+fill %.1f us/token\n",
                batch, mode, plain_us / tokens, masked_us / tokens, (masked_us - plain_us) / tokens,
                matcher_us / tokens);
  }
  return 0;
}
