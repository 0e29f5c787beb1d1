// Sampler and detokenizer throughput: microseconds per row for a batch of
// Llama-sized logits rows under common sampling settings, and per token for
// streaming detokenization. The logits are normal (sigma 3), which spreads
// the probability over thousands of tokens (top-p 0.9 keeps ~1300 of
// 32000); the last row's are peaked as a language model's usually are (16
// tokens about 12 above the rest hold ~90% of the mass).
//   bench_sampler [vocab=32000] [batch=64] [threads=0: OpenMP default]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/sampler.hpp"
#include "core/tokenizer.hpp"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int32_t vocab = argc > 1 ? std::atoi(argv[1]) : 32000;
  const int32_t batch = argc > 2 ? std::atoi(argv[2]) : 64;
  const int32_t threads = argc > 3 ? std::atoi(argv[3]) : 0;

  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(vocab) * batch);  // [batch, vocab]
  for (auto& v : logits) v = normal(rng);
  std::vector<float> peaked(logits.size());
  std::normal_distribution<float> low(0.0f, 2.0f);
  for (auto& v : peaked) v = low(rng);
  for (int32_t r = 0; r < batch; ++r)
    for (int i = 0; i < 16; ++i) peaked[static_cast<size_t>(r) * vocab + rng() % vocab] = 12.0f + low(rng);
  std::vector<int32_t> history(256);
  for (auto& id : history) id = static_cast<int32_t>(rng() % vocab);

  struct Setting {
    const char* name;
    llmk::SamplingParams params;
    const std::vector<float>* logits = nullptr;  // null: the normal ones
  };
  std::vector<Setting> settings(8);
  settings[0].name = "greedy";
  settings[0].params.temperature = 0.0f;
  settings[1].name = "temperature 0.8";
  settings[1].params.temperature = 0.8f;
  settings[2].name = "top_k 50";
  settings[2].params.top_k = 50;
  settings[3].name = "top_p 0.9";
  settings[3].params.top_p = 0.9f;
  settings[4].name = "top_k 50 + top_p 0.9 + min_p 0.05";
  settings[4].params.top_k = 50;
  settings[4].params.top_p = 0.9f;
  settings[4].params.min_p = 0.05f;
  settings[5].name = "top_p 0.9 + penalties (256 tokens)";
  settings[5].params.top_p = 0.9f;
  settings[5].params.repetition_penalty = 1.1f;
  settings[5].params.frequency_penalty = 0.2f;
  settings[6].name = "temperature 0.8 + logprobs 5";
  settings[6].params.temperature = 0.8f;
  settings[6].params.logprobs = 5;
  settings[7].name = "top_p 0.9, peaked logits";
  settings[7].params.top_p = 0.9f;
  settings[7].logits = &peaked;

  llmk::Sampler sampler(vocab, threads);
  std::vector<llmk::SampledToken> out(batch);
  std::printf("sampler: vocab %d, batch %d\n", vocab, batch);
  for (const auto& s : settings) {
    std::vector<llmk::SamplerRow> rows(batch);
    for (int32_t r = 0; r < batch; ++r) {
      rows[r].logits = (s.logits != nullptr ? *s.logits : logits).data() + static_cast<size_t>(r) * vocab;
      rows[r].params = &s.params;
      rows[r].prompt_ids = history;
      rows[r].generated_ids = history;
      rows[r].seed = r;
    }
    sampler.sample(rows, out);  // warm-up
    // Best of many steps: the machine may be shared, the minimum is the
    // sampler's own cost.
    double best = 1e30;
    const auto start = std::chrono::steady_clock::now();
    for (int iteration = 0; iteration < 3 || seconds_since(start) < 0.5; ++iteration) {
      const auto step_start = std::chrono::steady_clock::now();
      sampler.sample(rows, out);
      best = std::min(best, seconds_since(step_start));
    }
    const double per_row_us = best / batch * 1e6;
    std::printf("  %-38s %8.2f us/row  %8.3f ms/step\n", s.name, per_row_us, best * 1e3);
  }

  const std::string model = std::string(LLMK_SHARED_DIR) + "/models/llama2-tokenizer/tokenizer.model";
  llmk::Tokenizer tokenizer(model);
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "Streaming text with émoji 😀, 你好 and numbers " + std::to_string(i) + ". ";
  const auto ids = tokenizer.encode(text, true);
  const auto start = std::chrono::steady_clock::now();
  llmk::IncrementalDetokenizer detok(tokenizer, false);
  size_t bytes = 0;
  for (int32_t id : ids) bytes += detok.push(id).size();
  bytes += detok.flush().size();
  const double elapsed = seconds_since(start);
  std::printf("detokenizer: %zu tokens, %zu bytes, %.3f us/token\n", ids.size(), bytes, elapsed / ids.size() * 1e6);
  return 0;
}
