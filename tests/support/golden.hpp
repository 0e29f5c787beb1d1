// The stories260K golden vectors (../shared/golden/stories260K.json,
// float64 NumPy with Hugging Face Llama semantics) and the checks every
// executor's golden tests share: relative L2 error, argmax, and the five
// prompts as one mixed, chunked, paged batch driven to greedy continuations.
#pragma once

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/step.hpp"

namespace llmk::test {

struct GoldenCase {
  std::string prompt;
  std::vector<int32_t> input_ids, all_positions_argmax, greedy_ids;
  std::vector<double> last_logits;
  std::string greedy_text;
};

// ../shared (models, golden vectors): the LLMK_SHARED_DIR environment
// variable when set (as the engine reads it: test binaries carried to another
// machine, scripts/gpu-check.sh --prebuilt), else the build's.
inline std::string shared_dir() {
  const char* env = std::getenv("LLMK_SHARED_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(LLMK_SHARED_DIR);
}

inline const std::vector<GoldenCase>& golden_cases() {
  static const std::vector<GoldenCase> cases = [] {
    std::ifstream in(shared_dir() + "/golden/stories260K.json");
    REQUIRE(in);
    const nlohmann::json j = nlohmann::json::parse(in);
    std::vector<GoldenCase> out;
    for (const auto& c : j.at("cases"))
      out.push_back({c.at("prompt"), c.at("input_ids"), c.at("all_positions_argmax"), c.at("greedy_ids"),
                     c.at("last_logits"), c.at("greedy_text")});
    return out;
  }();
  return cases;
}

inline std::string stories_dir() { return shared_dir() + "/models/stories260K"; }

inline int32_t argmax(const float* x, int32_t n) { return static_cast<int32_t>(std::max_element(x, x + n) - x); }

// ||got - want|| / ||want||.
inline double rel_l2(const float* got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

// What the mixed batch produced per sequence.
struct MixedBatchResult {
  std::vector<std::vector<int32_t>> generated;           // [sequence] greedy ids
  std::vector<std::vector<float>> last_prompt_logits;    // [sequence] logits after the whole prompt
};

// The golden prompts as one paged batch over shuffled blocks of
// `block_size` slots: sequence s prefills in chunks of 1 + 2s tokens (some
// decode while others still prefill), then decodes greedily until each has
// `num_generated` ids. `run_step` executes a StepBatch and returns its
// logits rows, [num_logits, vocab].
inline MixedBatchResult run_mixed_golden_batch(const std::function<std::vector<float>(const StepBatch&)>& run_step,
                                               int32_t vocab, size_t num_generated, int32_t block_size,
                                               int32_t max_blocks, uint32_t shuffle_seed) {
  const auto& cases = golden_cases();
  const auto num_seqs = static_cast<int32_t>(cases.size());
  std::vector<int32_t> pool(static_cast<size_t>(num_seqs) * max_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(shuffle_seed));
  std::vector<int32_t> tables(pool.size());
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = pool[i] * block_size;

  struct Seq {
    std::vector<int32_t> tokens;  // prompt, then generated
    int32_t prompt_len = 0, done = 0, chunk = 1;
  };
  std::vector<Seq> seqs(num_seqs);
  MixedBatchResult result;
  result.generated.resize(num_seqs);
  result.last_prompt_logits.resize(num_seqs);
  for (int32_t s = 0; s < num_seqs; ++s) {
    seqs[s].tokens = cases[s].input_ids;
    seqs[s].prompt_len = static_cast<int32_t>(cases[s].input_ids.size());
    seqs[s].chunk = 1 + 2 * s;
  }
  for (bool any_left = true; any_left;) {
    StepBatch b;
    b.block_size = block_size;
    b.max_blocks_per_seq = max_blocks;
    b.query_start = {0};
    std::vector<int32_t> row_seq;
    for (int32_t s = 0; s < num_seqs; ++s) {
      Seq& q = seqs[s];
      if (result.generated[s].size() >= num_generated) continue;
      const int32_t count = q.done < q.prompt_len ? std::min(q.chunk, q.prompt_len - q.done) : 1;
      for (int32_t i = 0; i < count; ++i) {
        const int32_t pos = q.done + i;
        b.token_ids.push_back(q.tokens[pos]);
        b.positions.push_back(pos);
        b.slot_mapping.push_back(tables[s * max_blocks + pos / block_size] + pos % block_size);
      }
      q.done += count;
      b.query_start.push_back(b.num_tokens());
      b.context_lens.push_back(q.done);
      b.block_tables.insert(b.block_tables.end(), tables.begin() + s * max_blocks,
                            tables.begin() + (s + 1) * max_blocks);
      if (q.done >= q.prompt_len) {
        b.logits_rows.push_back(b.num_tokens() - 1);
        row_seq.push_back(s);
      }
    }
    if (b.num_tokens() == 0) break;
    const std::vector<float> logits = run_step(b);
    for (size_t i = 0; i < row_seq.size(); ++i) {
      const int32_t s = row_seq[i];
      const float* row = logits.data() + i * vocab;
      if (result.generated[s].empty()) result.last_prompt_logits[s].assign(row, row + vocab);
      const int32_t next = argmax(row, vocab);
      result.generated[s].push_back(next);
      seqs[s].tokens.push_back(next);
    }
    any_left = false;
    for (int32_t s = 0; s < num_seqs; ++s) any_left = any_left || result.generated[s].size() < num_generated;
  }
  return result;
}

}  // namespace llmk::test
