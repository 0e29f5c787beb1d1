// The whole forward pass against golden vectors computed in float64 NumPy
// with Hugging Face Llama semantics (../shared/golden/stories260K.json):
// all-position argmax, last-position logits, greedy continuations; alone,
// and as one mixed batch of chunked prefills and decodes over a paged cache.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/generate.hpp"
#include "core/model.hpp"
#include "core/plugin_loader.hpp"
#include "core/tokenizer.hpp"
#include "support/command.hpp"
#include "support/golden.hpp"
#include "support/prompt_step.hpp"

namespace {

using namespace llmk;

using test::argmax;
using test::run_command;
using test::GoldenCase;
using test::rel_l2;

const std::vector<GoldenCase>& golden() { return test::golden_cases(); }
std::string model_dir() { return test::stories_dir(); }

struct Fixture {
  std::shared_ptr<const Checkpoint> checkpoint = load_checkpoint(model_dir());
  PluginRegistry plugins{{LLMK_PLUGIN_BUILD_DIR}};
  EngineConfig cfg;
  std::unique_ptr<Model> model;
  explicit Fixture(uint32_t threads = 2, const std::string& linear_options = "{}", uint32_t step_tokens = 512) {
    cfg.executor.num_threads = static_cast<int32_t>(threads);
    cfg.kv_cache.capacity_tokens = 2048;
    cfg.scheduler.max_num_batched_tokens = step_tokens;
    cfg.plugins.linear_options = linear_options;
    model = std::make_unique<Model>(checkpoint, plugins, cfg, resolve_runtime(cfg, *checkpoint));
  }
};

// One prefill of the whole prompt over a contiguous range, logits for every row.
std::vector<float> all_logits(Model& model, const std::vector<int32_t>& ids) {
  const StepBatch b = test::whole_prompt_step(ids, 1024);
  const auto n = static_cast<int32_t>(ids.size());
  std::vector<float> logits(static_cast<size_t>(n) * model.config().vocab_size);
  model.forward(b, logits.data());
  return logits;
}

}  // namespace

TEST_CASE("stories260K: argmax at every position and the last logits match the float64 reference", "[golden]") {
  const uint32_t threads = GENERATE(1u, 2u);
  Fixture f(threads);
  const int32_t vocab = f.model->config().vocab_size;
  for (const GoldenCase& c : golden()) {
    INFO("prompt '" << c.prompt << "', threads " << threads);
    const std::vector<float> logits = all_logits(*f.model, c.input_ids);
    for (size_t i = 0; i < c.input_ids.size(); ++i) CHECK(argmax(logits.data() + i * vocab, vocab) == c.all_positions_argmax[i]);
    CHECK(rel_l2(logits.data() + (c.input_ids.size() - 1) * vocab, c.last_logits) < 1e-4);
  }
}

TEST_CASE("stories260K: greedy continuations match the reference ids and text", "[golden]") {
  Fixture f;
  Tokenizer tokenizer(f.checkpoint->tokenizer_path());
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = 48;
  for (const GoldenCase& c : golden()) {
    INFO("prompt '" << c.prompt << "'");
    CHECK(tokenizer.encode(c.prompt, true) == c.input_ids);
    const GenerateResult r = generate(*f.model, c.input_ids, greedy, {2}, [](int32_t) { return true; });
    CHECK(r.token_ids == c.greedy_ids);
    CHECK(tokenizer.decode(r.token_ids) == c.greedy_text);
  }
}

TEST_CASE("stories260K: prefill in small chunks gives the same logits as one prefill", "[golden]") {
  Fixture f(2, "{}", 3);  // at most 3 tokens per forward
  const GoldenCase& c = golden()[4];
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = 48;
  const GenerateResult r = generate(*f.model, c.input_ids, greedy, {2}, [](int32_t) { return true; });
  CHECK(r.token_ids == c.greedy_ids);
}

TEST_CASE("stories260K: the five prompts as one mixed, chunked, paged batch equal each prompt alone", "[golden]") {
  Fixture f;
  const int32_t vocab = f.model->config().vocab_size;
  const auto& cases = golden();
  const int32_t num_seqs = static_cast<int32_t>(cases.size());
  const size_t want = 20;  // generated tokens per sequence
  const test::MixedBatchResult r = test::run_mixed_golden_batch(
      [&](const StepBatch& b) {
        std::vector<float> logits(static_cast<size_t>(b.num_logits()) * vocab);
        f.model->forward(b, logits.data());
        return logits;
      },
      vocab, want, /*block_size=*/7, /*max_blocks=*/16, /*shuffle_seed=*/42);
  for (int32_t s = 0; s < num_seqs; ++s) {
    INFO("sequence " << s);
    CHECK(rel_l2(r.last_prompt_logits[s].data(), cases[s].last_logits) < 1e-4);
    CHECK(std::equal(r.generated[s].begin(), r.generated[s].end(), cases[s].greedy_ids.begin()));
  }
  // And alone: the batch gives the same last-prompt logits as a solo prefill, to float rounding.
  for (int32_t s = 0; s < num_seqs; ++s) {
    const std::vector<float> solo = all_logits(*f.model, cases[s].input_ids);
    const float* last = solo.data() + (cases[s].input_ids.size() - 1) * vocab;
    std::vector<double> ref(last, last + vocab);
    CHECK(rel_l2(r.last_prompt_logits[s].data(), ref) < 1e-5);
  }
}

TEST_CASE("saved KV slots restore to the same next-token logits", "[golden]") {
  Fixture f;
  const int32_t vocab = f.model->config().vocab_size;
  const GoldenCase& c = golden()[3];
  all_logits(*f.model, c.input_ids);
  std::vector<int32_t> slots(c.input_ids.size());
  std::iota(slots.begin(), slots.end(), 0);
  const std::vector<uint8_t> saved = f.model->save_kv(slots);
  all_logits(*f.model, golden()[4].input_ids);  // overwrites slots 0..
  f.model->restore_kv(slots, saved);
  // Decode the golden next token on top of the restored prompt.
  StepBatch b;
  const int32_t n = static_cast<int32_t>(c.input_ids.size());
  b.token_ids = {c.greedy_ids[0]};
  b.positions = {n};
  b.slot_mapping = {n};
  b.query_start = {0, 1};
  b.context_lens = {n + 1};
  b.block_tables = {0};
  b.max_blocks_per_seq = 1;
  b.block_size = 1024;
  b.logits_rows = {0};
  std::vector<float> logits(vocab);
  f.model->forward(b, logits.data());
  CHECK(argmax(logits.data(), vocab) == c.greedy_ids[1]);
}

TEST_CASE("llmk generate --temperature 0 prints the golden greedy text", "[golden][cli]") {
  for (const GoldenCase& c : golden()) {
    INFO("prompt '" << c.prompt << "'");
    const std::string cmd = std::string(LLMK_BINARY_DIR) + "/bin/llmk --log-level warn generate --model " + model_dir() +
                            " --prompt '" + c.prompt + "' --max-tokens 48 --temperature 0 --threads 2";
    auto [status, out] = run_command(cmd);
    CHECK(status == 0);
    // The CLI continues the prompt, so a leading space of the first token is kept.
    if (!c.prompt.empty() && !out.empty() && out[0] == ' ') out.erase(0, 1);
    CHECK(out == c.greedy_text);
  }
}
