#include "core/sampler.hpp"

#include <omp.h>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "core/error.hpp"
#include "core/sampler_draft.hpp"
#include "core/sampler_math.hpp"

namespace llmk {

using sampler_detail::exp_nonpositive;
using sampler_detail::Scored;
using sampler_detail::Weighted;

namespace {

// Rows of at least this many logits in total go to several threads: below
// it, waking the OpenMP team costs more than it saves.
constexpr int64_t kMinParallelLogits = 1 << 18;

bool is_greedy(const SamplingParams& p) { return p.temperature < kGreedyTemperature; }

}  // namespace

bool chooses_raw_argmax(const SamplingParams& p) {
  return is_greedy(p) && p.repetition_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f &&
         !p.structured;
}

uint64_t resolve_seed(const std::optional<uint64_t>& seed) {
  if (seed) return *seed;
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

double sampler_uniform(uint64_t seed, uint32_t sample_index, uint64_t step) {
  using sampler_detail::mix64;
  const uint64_t h = mix64(mix64(mix64(seed) ^ sample_index) ^ step);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

struct Sampler::Scratch {
  std::vector<float> logits;     // [vocab] processed logits
  std::vector<float> weights;    // [vocab] exp(logit - max), when the whole vocabulary is needed
  std::vector<int32_t> counts;   // [vocab] all zero between rows
  std::vector<uint8_t> seen;     // [vocab] all zero between rows
  std::vector<Weighted> candidates;
  std::vector<Scored> top;       // top-k selection, logprob listing
  std::vector<float> q;          // [vocab] all zero between rows (a draft's q, spread out)

  explicit Scratch(int32_t vocab) : logits(vocab), weights(vocab), counts(vocab, 0), seen(vocab, 0), q(vocab, 0.0f) {}
};

Sampler::Sampler(int32_t vocab_size, int32_t max_threads) : vocab_size_(vocab_size) {
  if (vocab_size <= 0) throw Error(ErrorCode::invalid_argument, "sampler vocab_size must be > 0");
  num_threads_ = max_threads > 0 ? max_threads : std::max(1, omp_get_max_threads());
  for (int32_t t = 0; t < num_threads_; ++t) scratch_.push_back(std::make_unique<Scratch>(vocab_size));
}

Sampler::~Sampler() = default;

namespace {

// Steps 1-3 of the header. Returns the processed logits: row.logits itself
// when nothing changes them, else `logits` (scratch) filled. [vocab]
const float* process(const SamplerRow& row, int32_t vocab, std::vector<float>& logits, std::vector<int32_t>& counts,
                     std::vector<uint8_t>& seen) {
  const SamplingParams& p = *row.params;
  const bool penalize = p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
  const bool scale = !is_greedy(p) && p.temperature != 1.0f;
  if (!penalize && !scale) return row.logits;

  const float* raw = row.logits;  // [vocab]
  float* z = logits.data();       // [vocab]
  if (scale) {
    const float t = p.temperature;
#pragma omp simd
    for (int32_t i = 0; i < vocab; ++i) z[i] = raw[i] / t;
  } else {
    std::memcpy(z, raw, sizeof(float) * static_cast<size_t>(vocab));
  }
  if (!penalize) return z;

  // Each distinct history token is recomputed from its raw logit: penalties
  // first (in double), then the temperature.
  const bool count = p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
  const auto valid = [vocab](int32_t id) { return id >= 0 && id < vocab; };
  if (count) {
    for (int32_t id : row.generated_ids) if (valid(id)) ++counts[id];
  }
  const double penalty = p.repetition_penalty;
  const auto touch = [&](int32_t id) {
    if (!valid(id) || seen[id]) return;
    seen[id] = 1;
    double v = raw[id];
    if (penalty != 1.0) v = v > 0 ? v / penalty : v * penalty;
    if (counts[id] > 0) {
      v -= static_cast<double>(p.frequency_penalty) * counts[id] + static_cast<double>(p.presence_penalty);
    }
    z[id] = static_cast<float>(scale ? v / p.temperature : v);
  };
  for (int32_t id : row.prompt_ids) touch(id);
  for (int32_t id : row.generated_ids) touch(id);
  // Leave the scratch all zero for the next row.
  for (int32_t id : row.prompt_ids) if (valid(id)) seen[id] = 0;
  for (int32_t id : row.generated_ids) if (valid(id)) seen[id] = 0, counts[id] = 0;
  return z;
}

// The largest value, NaNs skipped (-inf when every value is NaN). Four
// independent 256-bit maxima hide the instruction's latency: a 32000-token
// row is 128 KB, read once per greedy row (the compiler left the plain loop
// scalar, 25 us a row).
float max_of(const float* z, int32_t n) {
  float m = -std::numeric_limits<float>::infinity();
  int32_t i = 0;
#if defined(__AVX__)
  if (n >= 32) {
    // MAXPS returns its second operand when either is NaN: a NaN logit
    // leaves the running maximum as it was, as std::max(m, NaN) does.
    __m256 a0 = _mm256_set1_ps(m), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 32 <= n; i += 32) {
      a0 = _mm256_max_ps(_mm256_loadu_ps(z + i), a0);
      a1 = _mm256_max_ps(_mm256_loadu_ps(z + i + 8), a1);
      a2 = _mm256_max_ps(_mm256_loadu_ps(z + i + 16), a2);
      a3 = _mm256_max_ps(_mm256_loadu_ps(z + i + 24), a3);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_max_ps(_mm256_max_ps(a0, a1), _mm256_max_ps(a2, a3)));
    for (float v : lanes) m = std::max(m, v);
  }
#endif
  for (; i < n; ++i) m = std::max(m, z[i]);
  return m;
}

// The first index holding the maximum m: ties go to the lowest id. Blocks are
// scanned with SIMD for the maximum, then one block element by element.
// -1 when no element equals m (every one NaN).
int32_t first_index_of(const float* z, int32_t begin, int32_t end, float m) {
  constexpr int32_t kBlock = 256;
  for (int32_t b = begin; b < end; b += kBlock) {
    const int32_t e = std::min(end, b + kBlock);
    if (max_of(z + b, e - b) == m) {
      for (int32_t i = b; i < e; ++i) {
        if (z[i] == m) return i;
      }
    }
  }
  return -1;
}

int32_t argmax(const float* z, int32_t n, float m) { return std::max(0, first_index_of(z, 0, n, m)); }

// Fills w[i] = exp(z[i] - m) and returns their sum.
double fill_weights(const float* z, int32_t n, float m, float* w) {
#pragma omp simd
  for (int32_t i = 0; i < n; ++i) w[i] = exp_nonpositive(z[i] - m);
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int32_t i = 0; i < n; ++i) sum += w[i];
  return sum;
}

// The first i with w[0] + ... + w[i] > target, or -1. Whole blocks are
// summed with SIMD first, so only one block is walked element by element.
int32_t draw_from_all(const float* w, int32_t n, double target) {
  constexpr int32_t kBlock = 256;
  double cumulative = 0.0;
  for (int32_t begin = 0; begin < n; begin += kBlock) {
    const int32_t end = std::min(n, begin + kBlock);
    double block = 0.0;
#pragma omp simd reduction(+ : block)
    for (int32_t i = begin; i < end; ++i) block += w[i];
    if (cumulative + block > target) {
      for (int32_t i = begin; i < end; ++i) {
        cumulative += w[i];
        if (cumulative > target) return i;
      }
      return end - 1;  // the block's own rounding: its last token
    }
    cumulative += block;
  }
  return -1;
}

// Estimated mass of the set {z >= t} (f32 sums of w, for choosing a
// threshold only: the exact double sum over the collected set decides) and
// its size.
struct SetEstimate {
  float mass = 0.0f;
  int32_t size = 0;
};
SetEstimate estimate_at_least(const float* z, const float* w, int32_t n, float t) {
  SetEstimate e;
  int32_t i = 0;
#if defined(__AVX2__)
  const __m256 vt = _mm256_set1_ps(t);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  for (; i + 16 <= n; i += 16) {
    const __m256 k0 = _mm256_cmp_ps(_mm256_loadu_ps(z + i), vt, _CMP_GE_OQ);
    const __m256 k1 = _mm256_cmp_ps(_mm256_loadu_ps(z + i + 8), vt, _CMP_GE_OQ);
    a0 = _mm256_add_ps(a0, _mm256_and_ps(k0, _mm256_loadu_ps(w + i)));
    a1 = _mm256_add_ps(a1, _mm256_and_ps(k1, _mm256_loadu_ps(w + i + 8)));
    e.size += __builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(k0) | (_mm256_movemask_ps(k1) << 8)));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(a0, a1));
  for (float v : lanes) e.mass += v;
#endif
  for (; i < n; ++i) {
    if (z[i] >= t) e.mass += w[i], ++e.size;
  }
  return e;
}

// A margin below the best logit whose set {z >= m - margin} holds at least
// `target` of the mass by the estimate: margins doubling from 1, then, while
// that set holds more than kTopPSetSize tokens, bisection of the last
// interval (five halvings at most), so that a wide distribution's set is
// collected and selected from a few times the nucleus rather than most of
// the vocabulary. Infinity where even 64 falls short (a far tail: every token).
constexpr int32_t kTopPSetSize = 512;
float top_p_margin(const float* z, const float* w, int32_t n, float m, double target) {
  float lo = 0.0f, hi = 1.0f;
  SetEstimate at_hi = estimate_at_least(z, w, n, m - hi);
  while (at_hi.mass < target) {
    lo = hi;
    hi *= 2.0f;
    if (hi > 64.0f) return std::numeric_limits<float>::infinity();
    at_hi = estimate_at_least(z, w, n, m - hi);
  }
  for (int step = 0; step < 5 && at_hi.size > kTopPSetSize; ++step) {  // mass(m - lo) < target <= mass(m - hi)
    const float mid = 0.5f * (lo + hi);
    const SetEstimate at_mid = estimate_at_least(z, w, n, m - mid);
    if (at_mid.mass < target) lo = mid;
    else hi = mid, at_hi = at_mid;
  }
  return hi;
}

// Steps 4-6: leaves the tokens to draw from in `cand`, best first, or
// returns false when no truncation applies (draw from the whole
// vocabulary). `w` and `total` (weights exp(z - m) and their sum) must be
// filled when top-p applies without top-k.
bool truncate(const SamplingParams& p, const float* z, const float* w, int32_t vocab, float m, double total,
              std::vector<Scored>& top, std::vector<Weighted>& cand) {
  const bool use_top_k = p.top_k > 0 && p.top_k < vocab;
  const bool use_top_p = p.top_p < 1.0f;
  const bool use_min_p = p.min_p > 0.0f;
  if (!use_top_k && !use_top_p && !use_min_p) return false;
  const float min_p_threshold = use_min_p ? m + std::log(p.min_p) : -std::numeric_limits<float>::infinity();
  cand.clear();

  if (use_top_k) {
    // k best, best first; top-p is then a walk down the prefix.
    sampler_detail::select_top_k(z, vocab, p.top_k, top);
    double mass = 0.0;
    for (const auto& t : top) {
      cand.push_back({t.logit, exp_nonpositive(t.logit - m), t.id});
      mass += cand.back().weight;
    }
    if (use_top_p) {
      const double target = static_cast<double>(p.top_p) * mass;
      double cumulative = 0.0;
      size_t keep = 0;
      while (keep < cand.size()) {
        cumulative += cand[keep++].weight;
        if (cumulative >= target) break;
      }
      cand.resize(std::max<size_t>(keep, 1));
    }
  } else if (use_top_p) {
    // The top-p set lies within {z >= m - margin} as soon as that set's mass
    // reaches top_p: every token outside is less likely than every token in.
    // A margin close to the smallest such comes from estimated masses (a
    // few vectorised passes, no candidates collected), then the set is
    // collected with exact sums; should the estimate have been short, the
    // margin doubles until the exact mass reaches top_p. Then select by
    // mass without sorting.
    const double target = static_cast<double>(p.top_p) * total;
    for (float margin = top_p_margin(z, w, vocab, m, target);; margin *= 2.0f) {
      cand.clear();
      double mass = 0.0;
      const float threshold = margin > 100.0f ? -std::numeric_limits<float>::infinity() : m - margin;
      for (int32_t i = 0; i < vocab; ++i) {
        if (z[i] >= threshold && w[i] > 0.0f) {
          cand.push_back({z[i], w[i], i});
          mass += w[i];
        }
      }
      if (mass >= target || margin > 100.0f) break;
    }
    cand.resize(std::max<size_t>(sampler_detail::select_top_mass(cand, target), 1));
  } else {
    for (int32_t i = 0; i < vocab; ++i) {
      if (z[i] >= min_p_threshold) cand.push_back({z[i], exp_nonpositive(z[i] - m), i});
    }
  }
  // min-p: probabilities relative to the best token do not change under
  // renormalisation, so it is a threshold on the logit. The best token
  // (logit m) always passes.
  if (use_min_p) std::erase_if(cand, [&](const Weighted& c) { return c.logit < min_p_threshold; });
  // The draw walks the candidates best first on every path (top-k leaves them
  // so), an order the CUDA sampler reproduces without sorting the vocabulary.
  if (!use_top_k) std::sort(cand.begin(), cand.end(), [](const Weighted& a, const Weighted& b) {
    return sampler_detail::better(a, b);
  });
  return true;
}

}  // namespace

ArgmaxPart argmax_part(const float* logits, int32_t begin, int32_t end) {
  ArgmaxPart part;
  if (begin >= end) return part;
  part.max = max_of(logits + begin, end - begin);
  part.index = first_index_of(logits, begin, end, part.max);
  return part;
}

ArgmaxPart merge_argmax(ArgmaxPart a, ArgmaxPart b) {
  if (a.index < 0) return b;  // a holds nothing but NaNs (or nothing)
  if (b.index < 0) return a;
  if (a.max != b.max) return a.max > b.max ? a : b;
  return a.index < b.index ? a : b;
}

int32_t greedy_token(const float* logits, int32_t vocab_size) {
  return argmax_token(argmax_part(logits, 0, vocab_size));
}

// Every token of positive weight, when no truncation applies.
void Sampler::all_candidates(const float* z, Scratch& s, int32_t vocab) {
  s.candidates.clear();
  for (int32_t i = 0; i < vocab; ++i)
    if (s.weights[i] > 0.0f) s.candidates.push_back({z[i], s.weights[i], i});
}

void Sampler::sample_row(const SamplerRow& row, Scratch& s, SampledToken& out) const {
  const SamplingParams& p = *row.params;
  const int32_t vocab = vocab_size_;
  const float* z = process(row, vocab, s.logits, s.counts, s.seen);  // [vocab]
  const bool want_logprobs = p.logprobs >= 0;
  const bool greedy = is_greedy(p);

  const float m = max_of(z, vocab);
  double total = 0.0;  // sum of exp(z - m) over the vocabulary, once computed
  bool have_weights = false;
  auto ensure_weights = [&] {
    if (!have_weights) {
      total = fill_weights(z, vocab, m, s.weights.data());
      have_weights = true;
    }
  };

  if (greedy) {
    out.token_id = argmax(z, vocab, m);
  } else {
    const bool top_p_alone = p.top_p < 1.0f && !(p.top_k > 0 && p.top_k < vocab);
    if (want_logprobs || top_p_alone) ensure_weights();
    const double u = sampler_uniform(row.seed, row.sample_index, row.generated_ids.size());
    // A draft x (SamplerRow::draft_token) takes the first w(x) of the draw's
    // range: accepted with probability p(x), else the rest of the range
    // draws from p without x. Every token keeps probability p.
    const int32_t x = row.draft_token;
    if (!row.draft_probs.empty()) {
      ensure_weights();  // a draft drawn from q: sampler_draft.hpp
      if (!truncate(p, z, s.weights.data(), vocab, m, total, s.top, s.candidates)) all_candidates(z, s, vocab);
      out.token_id = sampler_detail::verify_against_q(s.candidates, x, row.draft_probs, u, s.q);
    } else if (truncate(p, z, s.weights.data(), vocab, m, total, s.top, s.candidates)) {
      double mass = 0.0, wx = 0.0;
      for (const auto& c : s.candidates) {
        mass += c.weight;
        if (c.id == x) wx = c.weight;
      }
      const double target = u * mass - wx;
      double cumulative = 0.0;
      out.token_id = target < 0 ? x : argmax(z, vocab, m);  // argmax: should rounding leave the target unreached
      for (const auto& c : s.candidates) {
        if (target < 0) break;
        if (c.id == x) continue;
        cumulative += c.weight;
        if (cumulative > target) {
          out.token_id = c.id;
          break;
        }
      }
    } else {
      ensure_weights();
      const float wx = x >= 0 ? s.weights[x] : 0.0f;
      if (u * total < wx) {
        out.token_id = x;
      } else {
        if (x >= 0) s.weights[x] = 0.0f;
        out.token_id = draw_from_all(s.weights.data(), vocab, u * total - wx);
        if (x >= 0) s.weights[x] = wx;
        if (out.token_id < 0) out.token_id = argmax(z, vocab, m);  // rounding left the target unreached
      }
    }
  }

  out.has_logprobs = want_logprobs;
  out.logprobs.top.clear();
  if (want_logprobs) {
    ensure_weights();
    const double log_normalizer = static_cast<double>(m) + std::log(total);
    out.logprobs.token_id = out.token_id;
    out.logprobs.logprob = static_cast<float>(static_cast<double>(z[out.token_id]) - log_normalizer);
    if (p.logprobs > 0) {
      sampler_detail::select_top_k(z, vocab, p.logprobs, s.top);
      for (const auto& t : s.top) {
        out.logprobs.top.emplace_back(t.id, static_cast<float>(static_cast<double>(t.logit) - log_normalizer));
      }
    }
  }
}

void Sampler::sample(std::span<const SamplerRow> rows, std::span<SampledToken> out) {
  if (out.size() < rows.size()) {
    throw Error(ErrorCode::invalid_argument, "sampler: " + std::to_string(out.size()) + " outputs for " +
                                                 std::to_string(rows.size()) + " rows");
  }
  for (const auto& row : rows) {
    if (row.logits == nullptr || row.params == nullptr) {
      throw Error(ErrorCode::invalid_argument, "sampler: a row without logits or params");
    }
  }
  const int64_t num_rows = static_cast<int64_t>(rows.size());
  const bool parallel = num_threads_ > 1 && num_rows > 1 && num_rows * vocab_size_ >= kMinParallelLogits;
  if (!parallel) {
    for (int64_t i = 0; i < num_rows; ++i) sample_row(rows[i], *scratch_[0], out[i]);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(num_threads_)
  for (int64_t i = 0; i < num_rows; ++i) {
    sample_row(rows[i], *scratch_[omp_get_thread_num()], out[i]);
  }
}

SampledToken Sampler::sample_one(const SamplerRow& row) {
  SampledToken out;
  sample(std::span<const SamplerRow>(&row, 1), std::span<SampledToken>(&out, 1));
  return out;
}

void Sampler::processed_logits(const SamplerRow& row, std::span<float> out) {
  Scratch& s = *scratch_[0];
  const float* z = process(row, vocab_size_, s.logits, s.counts, s.seen);
  std::copy_n(z, std::min<size_t>(out.size(), static_cast<size_t>(vocab_size_)), out.begin());
}

// Step 7's candidates into s.candidates, best first; weights filled.
void Sampler::fill_candidates(const SamplerRow& row, Scratch& s) const {
  const int32_t vocab = vocab_size_;
  const float* z = process(row, vocab, s.logits, s.counts, s.seen);  // [vocab]
  const float m = max_of(z, vocab);
  s.candidates.clear();
  if (is_greedy(*row.params)) {
    const int32_t id = argmax(z, vocab, m);
    s.candidates.push_back({z[id], 1.0f, id});
    return;
  }
  const double total = fill_weights(z, vocab, m, s.weights.data());
  if (!truncate(*row.params, z, s.weights.data(), vocab, m, total, s.top, s.candidates)) all_candidates(z, s, vocab);
  std::sort(s.candidates.begin(), s.candidates.end(),
            [](const Weighted& a, const Weighted& b) { return sampler_detail::better(a, b); });
}

std::vector<int32_t> Sampler::candidates(const SamplerRow& row) {
  fill_candidates(row, *scratch_[0]);
  std::vector<int32_t> ids;
  for (const auto& c : scratch_[0]->candidates) ids.push_back(c.id);
  return ids;
}

void Sampler::distribution(const SamplerRow& row, std::vector<TokenProb>& out) {
  fill_candidates(row, *scratch_[0]);
  double mass = 0.0;
  for (const auto& c : scratch_[0]->candidates) mass += c.weight;
  out.clear();
  for (const auto& c : scratch_[0]->candidates)
    if (c.weight > 0.0f) out.push_back({c.id, static_cast<float>(c.weight / mass)});
}

}  // namespace llmk
