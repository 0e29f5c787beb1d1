// kernels/cuda/sampling.cu against the CPU engine's llmk::Sampler (an
// independent implementation of the same steps) and a float64 reference of
// the truncation and the draw.
//
// Allowed disagreement, stated once: the device and the CPU sum float
// weights in double in different orders (and the device's exp may round
// differently from a CPU build that contracts to FMA), so where the float64
// reference puts a goal (top_p * mass at the top-p cut, or u * mass at the
// draw) within kBoundaryTolerance * mass of a cumulative boundary, the two
// may pick neighbouring tokens. Such rows are detected and counted, never
// compared; every other row must agree token for token.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/sampler.hpp"
#include "core/sampler_math.hpp"
#include "sampling.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;
namespace lc = llmk::cuda;

namespace {

constexpr double kBoundaryTolerance = 1e-6;
// |device logprob - float64| <= kLogprobAbsTolerance + kLogprobRelTolerance * |float64|:
// the float weights' exp (2e-7 relative each) moves log(total) by < 3e-7; the
// float result rounds at 6e-8 relative.
constexpr double kLogprobAbsTolerance = 1e-6;
constexpr double kLogprobRelTolerance = 2e-7;

struct RowCase {
  llmk::SamplingParams params;
  std::vector<float> logits;  // [vocab]
  std::vector<int32_t> prompt_ids, generated_ids;
  uint64_t seed = 0;
  uint32_t sample_index = 0;
};

lc::SamplingRowParams device_params(const RowCase& c, int32_t slot) {
  const llmk::SamplingParams& p = c.params;
  lc::SamplingRowParams d;
  d.temperature = p.temperature;
  d.top_k = p.top_k;
  d.top_p = p.top_p;
  d.min_p = p.min_p;
  d.log_min_p = p.min_p > 0.0f ? std::log(p.min_p) : 0.0f;
  d.repetition_penalty = p.repetition_penalty;
  d.frequency_penalty = p.frequency_penalty;
  d.presence_penalty = p.presence_penalty;
  d.seed = c.seed;
  d.step = c.generated_ids.size();
  d.sample_index = c.sample_index;
  d.num_logprobs = p.logprobs;
  d.penalty_slot = slot;
  return d;
}

bool better(const std::vector<float>& z, int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); }

// The float64 reference of steps 4-7 over the processed logits z: the token
// drawn, and whether a goal fell within tolerance of a boundary.
struct Reference {
  int32_t token = -1;
  bool ambiguous = false;
};
Reference reference_draw(const std::vector<float>& z, const llmk::SamplingParams& p, double u) {
  const int32_t vocab = static_cast<int32_t>(z.size());
  std::vector<int32_t> order(vocab);
  for (int32_t i = 0; i < vocab; ++i) order[i] = i;
  const int32_t argmax = *std::min_element(order.begin(), order.end(), [&](int32_t a, int32_t b) { return better(z, a, b); });
  Reference r;
  if (p.temperature < llmk::kGreedyTemperature) {
    r.token = argmax;
    return r;
  }
  const double m = z[argmax];
  std::vector<double> w(vocab);
  for (int32_t i = 0; i < vocab; ++i) w[i] = std::exp(z[i] - m);
  const bool use_top_k = p.top_k > 0 && p.top_k < vocab, use_top_p = p.top_p < 1.0f, use_min_p = p.min_p > 0.0f;
  std::vector<int32_t> kept;
  if (!use_top_k && !use_top_p && !use_min_p) {
    kept = order;  // id order
  } else {
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return better(z, a, b); });
    kept = order;
    if (use_top_k) kept.resize(p.top_k);
    if (use_top_p) {
      double mass = 0.0;
      for (int32_t id : kept) mass += w[id];
      const double goal = static_cast<double>(p.top_p) * mass;
      double cumulative = 0.0;
      size_t keep = 0;
      while (keep < kept.size()) {
        cumulative += w[kept[keep++]];
        if (std::abs(cumulative - goal) <= kBoundaryTolerance * mass) r.ambiguous = true;
        if (cumulative >= goal) break;
      }
      kept.resize(std::max<size_t>(keep, 1));
    }
    if (use_min_p) {
      const float threshold = static_cast<float>(m) + std::log(p.min_p);
      std::erase_if(kept, [&](int32_t id) { return z[id] < threshold; });
    }
  }
  double mass = 0.0;
  for (int32_t id : kept) mass += w[id];
  const double goal = u * mass;
  double cumulative = 0.0;
  r.token = argmax;
  for (int32_t id : kept) {
    cumulative += w[id];
    if (w[id] > 0.0 && std::abs(cumulative - goal) <= kBoundaryTolerance * mass) r.ambiguous = true;
    if (cumulative > goal) {
      r.token = id;
      break;
    }
  }
  return r;
}

// Random logits; `quantized` rounds them to quarters so many tie.
std::vector<float> make_logits(int32_t vocab, uint64_t seed, float spread, bool quantized) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> z(vocab);
  for (float& v : z) v = quantized ? std::round(normal(rng) * 4.0f) / 4.0f : normal(rng);
  return z;
}

// A grid of parameter sets covering each truncation alone and combined,
// penalties, greedy and logprobs.
std::vector<llmk::SamplingParams> parameter_grid() {
  std::vector<llmk::SamplingParams> grid;
  auto add = [&](auto edit) {
    llmk::SamplingParams p;
    p.temperature = 1.0f;
    p.top_p = 1.0f;
    edit(p);
    llmk::validate_sampling_params(p);
    grid.push_back(p);
  };
  add([](auto& p) { p.temperature = 0.0f; p.logprobs = 3; });
  add([](auto& p) { p.temperature = 0.0f; p.repetition_penalty = 1.5f; p.presence_penalty = 1.0f; });
  add([](auto& p) { p.temperature = 1.0f; p.logprobs = 0; });
  add([](auto& p) { p.temperature = 0.7f; p.logprobs = 20; });
  add([](auto& p) { p.top_k = 1; });
  add([](auto& p) { p.top_k = 5; p.temperature = 1.3f; p.logprobs = 5; });
  add([](auto& p) { p.top_k = 300; });
  add([](auto& p) { p.top_p = 0.9f; });
  add([](auto& p) { p.top_p = 0.3f; p.temperature = 0.8f; });
  add([](auto& p) { p.min_p = 0.1f; });
  add([](auto& p) { p.min_p = 0.02f; p.temperature = 1.5f; p.logprobs = 2; });
  add([](auto& p) { p.top_k = 40; p.top_p = 0.8f; });
  add([](auto& p) { p.top_k = 50; p.top_p = 0.95f; p.min_p = 0.05f; p.temperature = 0.9f; });
  add([](auto& p) { p.top_p = 0.7f; p.min_p = 0.2f; });
  add([](auto& p) { p.repetition_penalty = 1.3f; p.frequency_penalty = 0.5f; p.presence_penalty = 0.3f; p.top_p = 0.9f; });
  add([](auto& p) { p.repetition_penalty = 0.8f; p.frequency_penalty = -0.4f; p.temperature = 0.6f; p.logprobs = 4; });
  add([](auto& p) { p.frequency_penalty = 1.2f; p.top_k = 20; p.min_p = 0.01f; });
  return grid;
}

std::vector<RowCase> make_rows(int32_t vocab, uint64_t seed, int num_rows) {
  const auto grid = parameter_grid();
  std::mt19937_64 rng(seed);
  std::vector<RowCase> rows;
  for (int r = 0; r < num_rows; ++r) {
    RowCase c;
    c.params = grid[r % grid.size()];
    c.logits = make_logits(vocab, rng(), r % 3 == 0 ? 1.0f : 3.0f, r % 2 == 1);
    std::uniform_int_distribution<int32_t> id(0, vocab - 1);
    const int num_prompt = static_cast<int>(rng() % 30), num_generated = static_cast<int>(rng() % 12);
    for (int i = 0; i < num_prompt; ++i) c.prompt_ids.push_back(id(rng));
    for (int i = 0; i < num_generated; ++i) c.generated_ids.push_back(id(rng));
    c.seed = rng();
    c.sample_index = static_cast<uint32_t>(rng() % 4);
    rows.push_back(std::move(c));
  }
  return rows;
}

struct DeviceResult {
  std::vector<int32_t> tokens;
  std::vector<lc::SampledLogprob> logprobs;  // [num_rows, kSamplingLogprobsPerRow]
  std::vector<int32_t> counts;               // [num_rows, vocab] after the appends
  std::vector<uint32_t> prompt_mask;         // [num_rows, words]
};

// Fills one penalty slot per row from its prompt, appends its generated
// tokens one step at a time (as the engine would), then samples every row.
// in_place: the processed logits overwrite the logits (row_stride == vocab).
DeviceResult run_device(const std::vector<RowCase>& rows, int32_t vocab, int64_t row_stride, bool in_place = false) {
  const int32_t num_rows = static_cast<int32_t>(rows.size());
  const int64_t words = lc::prompt_mask_words(vocab);
  std::vector<float> logits(static_cast<size_t>(num_rows) * row_stride, std::numeric_limits<float>::quiet_NaN());
  std::vector<lc::SamplingRowParams> params;
  size_t max_generated = 0;
  for (int32_t r = 0; r < num_rows; ++r) {
    std::copy(rows[r].logits.begin(), rows[r].logits.end(), logits.begin() + r * row_stride);
    params.push_back(device_params(rows[r], r));
    max_generated = std::max(max_generated, rows[r].generated_ids.size());
  }
  device_buffer<float> d_logits(logits), d_workspace(static_cast<size_t>(num_rows) * vocab);
  device_buffer<lc::SamplingRowParams> d_params(params);
  device_buffer<int32_t> d_counts(static_cast<size_t>(num_rows) * vocab), d_tokens(num_rows);
  device_buffer<uint32_t> d_mask(static_cast<size_t>(num_rows) * words);
  device_buffer<lc::SampledLogprob> d_logprobs(static_cast<size_t>(num_rows) * lc::kSamplingLogprobsPerRow);
  const lc::PenaltyState state{d_counts.get(), d_mask.get(), num_rows, vocab};

  for (int32_t r = 0; r < num_rows; ++r) {
    std::vector<int32_t> prompt = rows[r].prompt_ids;
    if (prompt.empty()) prompt.push_back(-1);  // a buffer of one ignored id
    device_buffer<int32_t> d_prompt(prompt);
    CUDA_REQUIRE(lc::penalty_state_init(state, r, d_prompt.get(), static_cast<int32_t>(rows[r].prompt_ids.size()), nullptr));
  }
  for (size_t step = 0; step < max_generated; ++step) {
    std::vector<int32_t> step_tokens(num_rows, -1);  // -1: the row generated fewer tokens
    for (int32_t r = 0; r < num_rows; ++r) {
      if (step < rows[r].generated_ids.size()) step_tokens[r] = rows[r].generated_ids[step];
    }
    device_buffer<int32_t> d_step(step_tokens);
    CUDA_REQUIRE(lc::penalty_state_append(state, d_params.get(), d_step.get(), num_rows, nullptr));
  }
  CUDA_REQUIRE(lc::sample_rows(d_logits.get(), row_stride, num_rows, vocab, d_params.get(), state,
                               in_place ? d_logits.get() : d_workspace.get(), d_tokens.get(), d_logprobs.get(),
                               nullptr));
  CUDA_REQUIRE(cudaGetLastError());
  REQUIRE_NO_SIMULATED_RACES();
  return {d_tokens.download(), d_logprobs.download(), d_counts.download(), d_mask.download()};
}

// Runs `rows` on the device under every seed and compares each row with
// the CPU Sampler and the float64 reference.
void check_rows(const std::vector<RowCase>& rows, int32_t vocab, int64_t row_stride, bool in_place = false) {
  llmk::Sampler cpu(vocab, 1);
  std::vector<llmk::SampledToken> want;
  std::vector<std::vector<float>> processed;
  std::vector<Reference> reference;
  int num_ambiguous = 0;
  for (const auto& c : rows) {
    llmk::SamplerRow row;
    row.logits = c.logits.data();
    row.params = &c.params;
    row.prompt_ids = c.prompt_ids;
    row.generated_ids = c.generated_ids;
    row.seed = c.seed;
    row.sample_index = c.sample_index;
    want.push_back(cpu.sample_one(row));
    processed.emplace_back(vocab);
    cpu.processed_logits(row, processed.back());
    const double u = llmk::sampler_uniform(c.seed, c.sample_index, c.generated_ids.size());
    reference.push_back(reference_draw(processed.back(), c.params, u));
    num_ambiguous += reference.back().ambiguous;
  }
  const int64_t words = lc::prompt_mask_words(vocab);
  for (auto seed : seeds) {
    reset_simulator(seed);
    const DeviceResult got = run_device(rows, vocab, row_stride, in_place);
    for (size_t r = 0; r < rows.size(); ++r) {
      const RowCase& c = rows[r];
      const llmk::SamplingParams& p = c.params;
      INFO("vocab " << vocab << " seed " << seed << " row " << r << " T " << p.temperature << " top_k " << p.top_k
                    << " top_p " << p.top_p << " min_p " << p.min_p << " rep " << p.repetition_penalty << " freq "
                    << p.frequency_penalty << " pres " << p.presence_penalty << " logprobs " << p.logprobs);
      // The delta-updated penalty state equals the state recomputed from the whole history.
      std::vector<int32_t> counts(vocab, 0);
      std::vector<uint32_t> mask(words, 0u);
      for (int32_t id : c.generated_ids) ++counts[id];
      for (int32_t id : c.prompt_ids) mask[id / 32] |= 1u << (id % 32);
      REQUIRE(std::equal(counts.begin(), counts.end(), got.counts.begin() + r * vocab));
      REQUIRE(std::equal(mask.begin(), mask.end(), got.prompt_mask.begin() + r * words));

      const int32_t token = got.tokens[r];
      if (!reference[r].ambiguous) {
        REQUIRE(want[r].token_id == reference[r].token);
        REQUIRE(token == want[r].token_id);
      } else {
        REQUIRE(token >= 0);
        REQUIRE(token < vocab);
      }
      // Logprobs: ids exactly as the CPU lists them, values within tolerance of float64.
      const lc::SampledLogprob* lp = got.logprobs.data() + r * lc::kSamplingLogprobsPerRow;
      if (p.logprobs < 0) {
        REQUIRE(lp[0].token_id == -1);
        continue;
      }
      const std::vector<float>& z = processed[r];
      const double m = *std::max_element(z.begin(), z.end());
      double total = 0.0;
      for (float v : z) total += std::exp(v - m);
      const auto logprob64 = [&](int32_t id) { return z[id] - m - std::log(total); };
      const auto close = [](double got_value, double want_value) {
        return std::abs(got_value - want_value) <= kLogprobAbsTolerance + kLogprobRelTolerance * std::abs(want_value);
      };
      REQUIRE(lp[0].token_id == token);
      CHECK(close(lp[0].logprob, logprob64(token)));
      REQUIRE(want[r].logprobs.top.size() == static_cast<size_t>(p.logprobs < vocab ? p.logprobs : vocab));
      for (size_t i = 0; i < want[r].logprobs.top.size(); ++i) {
        INFO("top " << i);
        REQUIRE(lp[1 + i].token_id == want[r].logprobs.top[i].first);
        CHECK(close(lp[1 + i].logprob, logprob64(lp[1 + i].token_id)));
      }
      for (size_t i = 1 + want[r].logprobs.top.size(); i < lc::kSamplingLogprobsPerRow; ++i) REQUIRE(lp[i].token_id == -1);
    }
  }
  INFO("rows near a boundary: " << num_ambiguous << " of " << rows.size());
  CHECK(num_ambiguous * 10 <= static_cast<int>(rows.size()));  // the tolerance exempts only rare rows
}

}  // namespace

TEST_CASE("The device sampler's constants and counter-based uniform equal the CPU's bit for bit", "[sampling]") {
  STATIC_REQUIRE(lc::kSamplingGreedyTemperature == llmk::kGreedyTemperature);
  STATIC_REQUIRE(lc::kSamplingMaxLogprobs == llmk::kMaxLogprobs);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t seed = i < 1000 ? static_cast<uint64_t>(i) : rng();
    const uint32_t sample = static_cast<uint32_t>(rng() >> (i % 3 == 0 ? 0 : 61));
    const uint64_t step = i % 2 == 0 ? rng() % 4096 : rng();
    REQUIRE(lc::sampling_mix64(seed) == llmk::sampler_detail::mix64(seed));
    const double a = lc::sampling_uniform(seed, sample, step), b = llmk::sampler_uniform(seed, sample, step);
    REQUIRE(std::memcmp(&a, &b, sizeof a) == 0);
  }
}

TEST_CASE("The device exp twin is within one float ulp of the CPU's vectorisable exp", "[sampling]") {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> dist(-90.0f, 0.0f);
  int num_identical = 0;
  for (int i = 0; i < 200000; ++i) {
    const float x = i == 0 ? -std::numeric_limits<float>::infinity() : (i == 1 ? 0.0f : dist(rng));
    const float a = lc::sampling_exp_nonpositive(x), b = llmk::sampler_detail::exp_nonpositive(x);
    INFO("x " << x);
    REQUIRE(std::abs(a - b) <= std::abs(b) * 1.2e-7f);
    num_identical += a == b;
  }
  // The same operations in the same order. This test file is built without -march=native; a CPU build
  // with it contracts the polynomial into FMAs and rounds about 2% of values one ulp differently, which
  // the token comparisons' boundary tolerance covers.
  CHECK(num_identical >= 190000);
}

TEST_CASE("Greedy device sampling is the argmax with ties to the lowest id, NaN never chosen", "[sampling]") {
  const int32_t vocab = 700;
  std::vector<RowCase> rows;
  for (int r = 0; r < 6; ++r) {
    RowCase c;
    c.params.temperature = 0.0f;
    c.logits = make_logits(vocab, 100 + r, 2.0f, true);
    const float top = *std::max_element(c.logits.begin(), c.logits.end());
    for (int32_t id : {650, 3 + r * 50, 699}) c.logits[id] = top;  // several maxima
    if (r % 2 == 1) c.logits[0] = std::numeric_limits<float>::quiet_NaN();
    rows.push_back(c);
  }
  for (auto seed : seeds) {
    reset_simulator(seed);
    const DeviceResult got = run_device(rows, vocab, vocab + 5);
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto& z = rows[r].logits;
      int32_t want = -1;
      for (int32_t i = 0; i < vocab; ++i) {
        if (!std::isnan(z[i]) && (want < 0 || z[i] > z[want])) want = i;
      }
      REQUIRE(got.tokens[r] == want);
    }
  }
}

TEST_CASE("Device sampling equals the CPU sampler token for token over truncations and penalties", "[sampling]") {
  for (const int32_t vocab : {1, 7, 513}) {
    const auto rows = make_rows(vocab, 1000 + vocab, 34);
    check_rows(rows, vocab, vocab + 3);
  }
}

TEST_CASE("Device sampling equals the CPU sampler for a 32000-token vocabulary", "[sampling]") {
  // In place: the workspace is the logits buffer itself.
  check_rows(make_rows(32000, 77, 17), 32000, 32000, true);
}

TEST_CASE("Device sampling equals the CPU sampler for Qwen2's 152064-token vocabulary", "[sampling]") {
  auto rows = make_rows(152064, 78, 17);
  // Cheap: four rows, one per kind of path (whole vocabulary, top-k + top-p, top-p alone, min-p with penalties).
  rows = {rows[3], rows[12], rows[7], rows[16]};
  check_rows(rows, 152064, 152064);
}

TEST_CASE("Device sampling launchers reject out-of-range arguments without launching", "[sampling]") {
  reset_simulator(1);
  device_buffer<float> logits(64), workspace(64);
  device_buffer<lc::SamplingRowParams> params(std::vector<lc::SamplingRowParams>(1));
  device_buffer<int32_t> tokens(1), counts(64), prompt(std::vector<int32_t>{1, 2});
  device_buffer<uint32_t> mask(2);
  const lc::PenaltyState state{counts.get(), mask.get(), 1, 64};
#if !LLMK_CUDA_NATIVE
  const auto launches = cudasim::num_launches();
#endif
  CHECK(lc::sample_rows(logits.get(), 64, 1, 0, params.get(), state, workspace.get(), tokens.get(), nullptr, nullptr) ==
        cudaErrorInvalidValue);
  CHECK(lc::sample_rows(logits.get(), 32, 1, 64, params.get(), state, workspace.get(), tokens.get(), nullptr, nullptr) ==
        cudaErrorInvalidValue);
  CHECK(lc::penalty_state_init(state, 1, prompt.get(), 2, nullptr) == cudaErrorInvalidValue);
  CHECK(lc::penalty_state_init(state, 0, nullptr, 2, nullptr) == cudaErrorInvalidValue);
  CHECK(lc::penalty_state_append(state, params.get(), tokens.get(), -1, nullptr) == cudaErrorInvalidValue);
#if !LLMK_CUDA_NATIVE
  CHECK(cudasim::num_launches() == launches);
#else
  CHECK(cudaGetLastError() == cudaSuccess);  // nothing was launched, so no launch error either
#endif
  CHECK(lc::penalty_state_bytes(3, 100) == 3 * (100 * 4 + 4 * 4));
}
