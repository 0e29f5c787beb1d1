// Device sampling, one block per row (contract in sampling.hpp, algorithm in
// docs/cuda_sampling.md).
//
// Every truncation is a best-first prefix of the tokens ordered by logit
// descending, ties by id ascending (the CPU's `better`): top-k is the first
// k, top-p the shortest prefix reaching a mass, min-p the tokens above a
// logit, and the draw walks the final prefix best first. A prefix is
// represented by its last token (a Bound) and found without sorting: a radix
// select over the 32-bit order-preserving key of the logit, 8 bits per round,
// with shared-memory histograms of counts and masses, then an id-order scan
// among the tokens whose key ties with the boundary's.
#include "cuda_compat.hpp"
#include "sampling.hpp"

namespace llmk::cuda {
namespace {

constexpr int kMaxWarps = 32;
constexpr int kRadixBins = 256;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ bool is_nan(float x) { return x != x; }

// A 32-bit key whose unsigned order is the float order (never 0 for a
// non-NaN value). -0 and +0 get one key: they compare equal on the CPU.
__device__ __forceinline__ uint32_t order_key(float x) {
  if (x == 0.0f) x = 0.0f;
  const uint32_t b = sampling_float_bits(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t key) {
  return sampling_bits_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// The best-first prefix ending at the token (key, id): a non-NaN token is in
// it when its key is larger, or equal with an id no larger.
struct Bound {
  uint32_t key;
  int32_t id;
};
constexpr Bound kEverything{0u, 0x7fffffff};
__device__ __forceinline__ bool within(uint32_t key, int32_t id, Bound b) {
  return key > b.key || (key == b.key && id <= b.id);
}

struct Candidate {
  float value;
  int32_t id;  // -1: none
};
__device__ __forceinline__ bool better(Candidate a, Candidate b) {
  if (a.id < 0) return false;
  if (b.id < 0) return true;
  return a.value > b.value || (a.value == b.value && a.id < b.id);
}

// Block-shared scratch (static shared memory, ~3.6 KiB).
struct RowShared {
  unsigned bin_count[kRadixBins];
  double bin_mass[kRadixBins];
  double warp_sum[kMaxWarps];
  float warp_value[kMaxWarps];
  int32_t warp_id[kMaxWarps];
  // Written by thread 0 (or one warp), read by all after a barrier.
  double above, target;
  unsigned digit, tie_count, tie_rank;
  int found;
  int32_t index;
  int num_top;
  float top_value[kSamplingMaxLogprobs];
  int32_t top_id[kSamplingMaxLogprobs];
  unsigned long long last;  // last_positive's reduction
};

__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// The block's sum, in every thread (the same value: warps are added in order).
__device__ double block_sum(double v, RowShared& sh) {
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, num_warps = blockDim.x / 32;
  if (lane == 0) sh.warp_sum[warp] = v;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < num_warps; ++w) total += sh.warp_sum[w];
  __syncthreads();  // warp_sum is reused by the next reduction
  return total;
}

// The block's best candidate (logit descending, id ascending), in every thread.
__device__ Candidate block_best(Candidate c, RowShared& sh) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const Candidate other{__shfl_xor_sync(kFullMask, c.value, offset), __shfl_xor_sync(kFullMask, c.id, offset)};
    if (better(other, c)) c = other;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, num_warps = blockDim.x / 32;
  if (lane == 0) {
    sh.warp_value[warp] = c.value;
    sh.warp_id[warp] = c.id;
  }
  __syncthreads();
  Candidate best{0.0f, -1};
  for (int w = 0; w < num_warps; ++w) {
    const Candidate other{sh.warp_value[w], sh.warp_id[w]};
    if (better(other, best)) best = other;
  }
  __syncthreads();
  return best;
}

__device__ __forceinline__ bool crosses(double cumulative, double target, bool strict) {
  return strict ? cumulative > target : cumulative >= target;
}

// The first index i of [0, n) at which f(0) + ... + f(i) crosses `target`
// (exceeds it when strict, reaches it otherwise), or -1. f >= 0. Each warp
// sums a contiguous chunk; the one warp whose chunk holds the crossing walks
// it 32 at a time with a warp scan.
template <class F>
__device__ int32_t scan_id_order(int32_t n, F f, double target, bool strict, RowShared& sh) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, num_warps = blockDim.x / 32;
  const int32_t chunk = ((n + num_warps - 1) / num_warps + 31) / 32 * 32;
  const int32_t begin = min(n, warp * chunk), end = min(n, begin + chunk);
  double partial = 0.0;
  for (int32_t i = begin + lane; i < end; i += 32) partial += f(i);
  partial = warp_sum(partial);
  if (lane == 0) sh.warp_sum[warp] = partial;
  if (threadIdx.x == 0) sh.index = -1;
  __syncthreads();
  double before = 0.0;
  for (int w = 0; w < warp; ++w) before += sh.warp_sum[w];
  if (!crosses(before, target, strict) && crosses(before + sh.warp_sum[warp], target, strict)) {
    int32_t found = end - 1;  // should the walk's rounding differ from the chunk sum's
    for (int32_t base = begin; base < end; base += 32) {
      const int32_t i = base + lane;
      double v = i < end ? f(i) : 0.0;
      for (int offset = 1; offset < 32; offset *= 2) {
        const double t = __shfl_up_sync(kFullMask, v, offset);
        if (lane >= offset) v += t;
      }
      const unsigned hits = __ballot_sync(kFullMask, i < end && crosses(before + v, target, strict));
      if (hits != 0) {
        found = base + __ffs(static_cast<int>(hits)) - 1;
        break;
      }
      before += __shfl_sync(kFullMask, v, 31);
    }
    if (lane == 0) sh.index = found;
  }
  __syncthreads();
  const int32_t index = sh.index;
  __syncthreads();
  return index;
}

struct Selection {
  Bound bound;
  bool found;
  bool draft;  // the goal fell in the excluded draft's share (found is false)
};

// Walks the members of prefix `b` whose key is at least `min_key`, best
// first, and returns the member at which the running total crosses the goal
// (exceeds it when strict, reaches it otherwise). The running total counts
// tokens (by_mass false; goal = target) or adds exp(z - m) (by_mass true;
// goal = target * the members' total mass). found is false when the whole
// set falls short (rounding, or fewer members than a count).
// Speculative verification: `exclude` (an id, -1: none) is left out of the
// members and `extra` is its mass, taken first: the goal becomes target *
// (the members' mass + extra) - extra, and a goal below 0 selects the
// draft itself (draft true).
__device__ Selection select_best_first(const float* z, int32_t n, float m, Bound b, uint32_t min_key, bool by_mass,
                                       double target, bool strict, RowShared& sh, int32_t exclude = -1,
                                       double extra = 0.0) {
  const int tid = threadIdx.x;
  uint32_t prefix = 0, prefix_mask = 0;
  for (int round = 0; round < 4; ++round) {
    const int shift = 24 - 8 * round;
    for (int bin = tid; bin < kRadixBins; bin += blockDim.x) {
      sh.bin_count[bin] = 0;
      sh.bin_mass[bin] = 0.0;
    }
    __syncthreads();
    for (int32_t i = tid; i < n; i += blockDim.x) {
      const float v = z[i];
      if (is_nan(v)) continue;
      const uint32_t key = order_key(v);
      if (i == exclude || key < min_key || !within(key, i, b) || (key & prefix_mask) != prefix) continue;
      const unsigned bin = (key >> shift) & 0xffu;
      atomicAdd(&sh.bin_count[bin], 1u);
      if (by_mass) atomicAdd(&sh.bin_mass[bin], static_cast<double>(sampling_exp_nonpositive(v - m)));
    }
    __syncthreads();
    if (tid == 0) {
      double above = 0.0;
      if (round == 0) {
        double total = 0.0;
        for (int bin = 0; bin < kRadixBins; ++bin) total += by_mass ? sh.bin_mass[bin] : sh.bin_count[bin];
        sh.target = by_mass ? target * (total + extra) - extra : target;
        sh.found = sh.target < 0.0 ? 2 : 1;
      } else {
        above = sh.above;
      }
      const double goal = sh.target;
      int chosen = -1, last = -1;
      double last_size = 0.0;
      for (int bin = kRadixBins - 1; bin >= 0; --bin) {
        if (sh.bin_count[bin] == 0) continue;
        const double size = by_mass ? sh.bin_mass[bin] : static_cast<double>(sh.bin_count[bin]);
        if (crosses(above + size, goal, strict)) {
          chosen = bin;
          break;
        }
        above += size;
        last = bin;
        last_size = size;
      }
      if (sh.found == 2) {
        chosen = -1;  // the draft's share: no member is walked
      } else if (chosen < 0) {
        if (round == 0 || last < 0) {
          sh.found = 0;
        } else {
          // This round's sums rounded below the previous round's: the
          // crossing lies in the last (worst) bin.
          chosen = last;
          above -= last_size;
        }
      }
      sh.digit = chosen < 0 ? 0u : static_cast<unsigned>(chosen);
      sh.tie_count = chosen < 0 ? 0u : sh.bin_count[chosen];
      sh.above = above;
    }
    __syncthreads();
    if (sh.found != 1) return {b, false, sh.found == 2};
    prefix |= sh.digit << shift;
    prefix_mask |= 0xffu << shift;
  }
  // Every thread has read the last round's digit and found before thread 0
  // writes tie_rank beside them (the compiler reads the four words as one:
  // compute-sanitizer's racecheck reported the overlap on an H200).
  __syncthreads();
  // The boundary's key is `prefix`; `tie_count` members share it, each
  // adding the same amount. Take the fewest of them, in id order, that cross.
  if (tid == 0) {
    const double each = by_mass ? static_cast<double>(sampling_exp_nonpositive(key_value(prefix) - m)) : 1.0;
    const unsigned count = sh.tie_count;
    const double above = sh.above, goal = sh.target;
    unsigned rank = count;
    if (each > 0.0) {
      const double estimate = (goal - above) / each;
      rank = estimate < 1.0 ? 1u : (estimate >= count ? count : static_cast<unsigned>(estimate));
      while (rank > 1 && crosses(above + (rank - 1) * each, goal, strict)) --rank;
      while (rank < count && !crosses(above + rank * each, goal, strict)) ++rank;
    }
    sh.tie_rank = rank;
  }
  __syncthreads();
  const double rank = sh.tie_rank;
  const int32_t id = scan_id_order(
      n,
      [=](int32_t i) {
        const float v = z[i];
        if (is_nan(v)) return 0.0;
        const uint32_t key = order_key(v);
        return i != exclude && key == prefix && key >= min_key && within(key, i, b) ? 1.0 : 0.0;
      },
      rank, false, sh);
  return {{prefix, id}, id >= 0, false};
}

// The best-first walk (logit descending, ties lowest id first) over the
// tokens of positive weight f(i): the token at which the running sum first
// exceeds `goal`, or -1 when the whole set falls short (rounding). The same
// radix rounds as select_best_first with f's masses in the bins; tokens tying
// with the boundary's logit may weigh differently here, so the last step is
// an id-order scan of their weights.
template <class F>
__device__ int32_t select_weighted(const float* z, int32_t n, F f, double goal, RowShared& sh) {
  const int tid = threadIdx.x;
  uint32_t prefix = 0, prefix_mask = 0;
  for (int round = 0; round < 4; ++round) {
    const int shift = 24 - 8 * round;
    for (int bin = tid; bin < kRadixBins; bin += blockDim.x) {
      sh.bin_count[bin] = 0;
      sh.bin_mass[bin] = 0.0;
    }
    __syncthreads();
    for (int32_t i = tid; i < n; i += blockDim.x) {
      const float v = z[i];
      if (is_nan(v)) continue;
      const uint32_t key = order_key(v);
      if ((key & prefix_mask) != prefix) continue;
      const double w = f(i);
      if (!(w > 0.0)) continue;
      const unsigned bin = (key >> shift) & 0xffu;
      atomicAdd(&sh.bin_count[bin], 1u);
      atomicAdd(&sh.bin_mass[bin], w);
    }
    __syncthreads();
    if (tid == 0) {
      double above = round == 0 ? 0.0 : sh.above;
      int chosen = -1, last = -1;
      double last_size = 0.0;
      for (int bin = kRadixBins - 1; bin >= 0; --bin) {
        if (sh.bin_count[bin] == 0) continue;
        const double size = sh.bin_mass[bin];
        if (above + size > goal) {
          chosen = bin;
          break;
        }
        above += size;
        last = bin;
        last_size = size;
      }
      if (chosen < 0 && round > 0 && last >= 0) {
        // This round's sums rounded below the previous round's: the
        // crossing lies in the last (worst) bin.
        chosen = last;
        above -= last_size;
      }
      sh.found = chosen >= 0 ? 1 : 0;
      sh.digit = chosen < 0 ? 0u : static_cast<unsigned>(chosen);
      sh.above = above;
    }
    __syncthreads();
    if (sh.found != 1) return -1;
    prefix |= sh.digit << shift;
    prefix_mask |= 0xffu << shift;
  }
  const double rest = goal - sh.above;
  __syncthreads();  // every thread has read above and found before the scan's writes
  return scan_id_order(
      n,
      [=](int32_t i) {
        const float v = z[i];
        return is_nan(v) || order_key(v) != prefix ? 0.0 : f(i);
      },
      rest, true, sh);
}

// The last token of positive weight f(i) in a walk's order (best first, or
// id order), or -1 when none has any: what a walk returns when rounding
// leaves its goal unreached (the CPU's draw_from and verify_against_q).
template <class F>
__device__ int32_t last_positive(const float* z, int32_t n, F f, bool best_first, RowShared& sh) {
  // Smallest (key, then ~id) first: the worst key, and within it the largest id.
  unsigned long long worst = ~0ull;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
    if (!(f(i) > 0.0)) continue;
    const unsigned long long rank = best_first ? order_key(z[i]) : 0u;
    const unsigned long long k = (rank << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(i));
    worst = k < worst ? k : worst;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const unsigned long long other = __shfl_xor_sync(kFullMask, worst, offset);
    worst = other < worst ? other : worst;
  }
  if (threadIdx.x == 0) sh.last = ~0ull;
  __syncthreads();
  if (threadIdx.x % 32 == 0) atomicMin(&sh.last, worst);
  __syncthreads();
  const unsigned long long found = sh.last;
  __syncthreads();
  return found == ~0ull ? -1 : static_cast<int32_t>(~static_cast<uint32_t>(found));
}

// A draft x drawn from q (the CPU's sampler_detail::verify_against_q): x with
// probability min(1, p(x)/q(x)) (u * q(x) < p(x)), else a draw from the
// normalised max(0, p - q) with u rescaled from [p(x)/q(x), 1) to [0, 1),
// walked in the draw's order (best first when truncated, id order
// otherwise) and never returning x; where no residual is left (p equal to q
// but for rounding), p without x. p: the row's weights over its candidate
// set (`member`), normalised; q: the row's [vocab] dense q. Returns -1 only
// when p has no mass.
template <class M>
__device__ int32_t verify_against_q(const float* z, int32_t vocab, float m, M member, bool truncated, int32_t x,
                                    const float* q, double u, RowShared& sh) {
  const auto weight = [=](int32_t i) {
    const float v = z[i];
    return is_nan(v) || !member(i) ? 0.0 : static_cast<double>(sampling_exp_nonpositive(v - m));
  };
  double partial = 0.0;
  for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) partial += weight(i);
  const double mass = block_sum(partial, sh);
  if (!(mass > 0.0)) return -1;
  const double wx = x >= 0 ? weight(x) : 0.0;
  const double px = wx / mass;
  const double qx = x >= 0 ? static_cast<double>(q[x]) : 0.0;
  if (u * qx < px) return x;
  // Rejected: only where p(x) < q(x), so the residual is 0 at x.
  const double a = qx > 0.0 ? px / qx : 0.0;
  const double v = (u - a) / (1.0 - a);
  const auto residual = [=](int32_t i) {
    if (i == x) return 0.0;
    const double r = weight(i) / mass - static_cast<double>(q[i]);
    return r > 0.0 ? r : 0.0;
  };
  const auto without_x = [=](int32_t i) { return i == x ? 0.0 : weight(i); };
  partial = 0.0;
  for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) partial += residual(i);
  const double left = block_sum(partial, sh);
  int32_t id = -1;
  if (left > 0.0) {
    const double target = v * left;
    id = truncated ? select_weighted(z, vocab, residual, target, sh) : scan_id_order(vocab, residual, target, true, sh);
    if (id < 0) id = last_positive(z, vocab, residual, truncated, sh);
  } else {
    const double target = v * (mass - wx);
    id = truncated ? select_weighted(z, vocab, without_x, target, sh)
                   : scan_id_order(vocab, without_x, target, true, sh);
    if (id < 0) id = last_positive(z, vocab, without_x, truncated, sh);
  }
  return id >= 0 ? id : x;  // none: p holds x alone, which is then accepted
}

// Steps 1-2 for a token in the history, in double as on the CPU, then step 3.
__device__ __forceinline__ float penalized(float raw, int32_t count, const SamplingRowParams& p, bool scale,
                                           bool count_penalties) {
  double v = raw;
  const double penalty = p.repetition_penalty;
  if (penalty != 1.0) v = v > 0 ? v / penalty : v * penalty;
  if (count_penalties && count > 0) {
    v -= static_cast<double>(p.frequency_penalty) * count + static_cast<double>(p.presence_penalty);
  }
  return static_cast<float>(scale ? v / p.temperature : v);
}

// One block per row; blockDim.x a multiple of 32, at most kSampleRowsMaxThreads
// (the launch bound makes ptxas fit its registers to that many threads).
// logits: [num_rows, row_stride]; params: [num_rows]; workspace: [num_rows, vocab]
// (may alias logits); token_ids: [num_rows]; logprobs: [num_rows, kSamplingLogprobsPerRow] or null.
constexpr int kSampleRowsMaxThreads = 1024;
__global__ void __launch_bounds__(kSampleRowsMaxThreads) sample_rows_kernel(const float* logits, int64_t row_stride, int32_t vocab,
                                   const SamplingRowParams* __restrict__ params, PenaltyState penalties,
                                   float* workspace, int32_t* __restrict__ token_ids,
                                   SampledLogprob* __restrict__ logprobs, const float* __restrict__ draft_q,
                                   const uint32_t* __restrict__ token_masks) {
  __shared__ RowShared sh;
  const int tid = threadIdx.x;
  const int64_t row = blockIdx.x;
  const SamplingRowParams p = params[row];
  const float* raw = logits + row * row_stride;   // [vocab]
  float* z = workspace + row * vocab;             // [vocab] processed logits

  // Steps 1-3, with the maximum (ties to the lowest id, NaN never chosen).
  const bool greedy = p.temperature < kSamplingGreedyTemperature;
  const bool scale = !greedy && p.temperature != 1.0f;
  const bool count_penalties = p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
  const bool penalize = (p.repetition_penalty != 1.0f || count_penalties) && p.penalty_slot >= 0 &&
                        p.penalty_slot < penalties.num_slots && penalties.vocab == vocab;
  const int32_t* counts = penalize ? penalties.counts + static_cast<int64_t>(p.penalty_slot) * vocab : nullptr;
  const uint32_t* prompt_mask =
      penalize ? penalties.prompt_mask + p.penalty_slot * prompt_mask_words(vocab) : nullptr;
  // Structured outputs: the row's allowed tokens (SamplingRowParams::mask_row).
  const uint32_t* allowed =
      p.mask_row >= 0 && token_masks != nullptr ? token_masks + p.mask_row * prompt_mask_words(vocab) : nullptr;
  const auto masked_out = [=](int32_t i) { return allowed != nullptr && !((allowed[i >> 5] >> (i & 31)) & 1u); };
  Candidate best{0.0f, -1};
  for (int32_t i = tid; i < vocab; i += blockDim.x) {
    const float x = masked_out(i) ? -INFINITY : raw[i];
    float v = scale ? x / p.temperature : x;
    if (penalize) {
      const int32_t count = counts[i];
      const bool in_prompt = (prompt_mask[i >> 5] >> (i & 31)) & 1u;
      if (in_prompt || count > 0) v = penalized(x, count, p, scale, count_penalties);
    }
    z[i] = v;
    if (!is_nan(v) && better(Candidate{v, i}, best)) best = {v, i};
  }
  best = block_best(best, sh);  // its barriers also publish z to the block
  if (penalize) {
    // A speculative row's history also holds the drafts fed before it (the
    // rows just before it of the same slot, at consecutive steps): each
    // distinct such token is processed again with its count, at its first
    // occurrence, then the best is found again.
    int32_t num_before = 0;
    while (num_before < row && num_before < kSamplingMaxDraftsBefore) {
      const SamplingRowParams& q = params[row - num_before - 1];
      if (q.penalty_slot != p.penalty_slot || q.draft_token < 0 || q.step + num_before + 1 != p.step) break;
      ++num_before;
    }
    if (num_before > 0) {
      for (int32_t j = tid + 1; j <= num_before; j += blockDim.x) {
        const int32_t d = params[row - j].draft_token;
        if (d >= vocab) continue;
        int32_t extra = 0;
        bool first = true;
        for (int32_t i = 1; i <= num_before; ++i) {
          if (params[row - i].draft_token != d) continue;
          ++extra;
          first = first && i >= j;
        }
        if (first && !masked_out(d)) z[d] = penalized(raw[d], counts[d] + extra, p, scale, count_penalties);
      }
      __syncthreads();
      best = Candidate{0.0f, -1};
      for (int32_t i = tid; i < vocab; i += blockDim.x) {
        const float v = z[i];
        if (!is_nan(v) && better(Candidate{v, i}, best)) best = {v, i};
      }
      best = block_best(best, sh);
    }
  }
  const float m = best.id >= 0 ? best.value : -INFINITY;
  int32_t token = best.id >= 0 ? best.id : 0;

  const auto weight = [=](int32_t i) {
    const float v = z[i];
    return is_nan(v) ? 0.0 : static_cast<double>(sampling_exp_nonpositive(v - m));
  };
  double total = -1.0;  // sum of exp(z - m) over the vocabulary, once computed
  if (!greedy) {
    const double u = sampling_uniform(p.seed, p.sample_index, p.step);
    // A draft x takes the first p(x) of the draw's range (the CPU's rule):
    // u below it returns x, else the rest of the range draws without x.
    const int32_t x = p.draft_token >= 0 && p.draft_token < vocab && !is_nan(z[p.draft_token]) ? p.draft_token : -1;
    const bool use_top_k = p.top_k > 0 && p.top_k < vocab;
    const bool use_top_p = p.top_p < 1.0f;
    const bool use_min_p = p.min_p > 0.0f;
    const bool truncated = use_top_k || use_top_p || use_min_p;
    if (p.draft_q_row >= 0 && draft_q != nullptr) {
      // A draft drawn from q (SamplingRowParams::draft_q_row).
      Bound kept = kEverything;
      uint32_t min_key = 0u;
      if (truncated) {
        if (use_top_k) {
          const Selection s = select_best_first(z, vocab, m, kept, 0u, false, p.top_k, false, sh);
          if (s.found) kept = s.bound;
        }
        if (use_top_p) {
          const Selection s = select_best_first(z, vocab, m, kept, 0u, true, p.top_p, false, sh);
          if (s.found) kept = s.bound;
        }
        min_key = use_min_p ? order_key(m + p.log_min_p) : 0u;
      }
      const auto member = [=](int32_t i) {
        const uint32_t key = order_key(z[i]);
        return key >= min_key && within(key, i, kept);
      };
      const int32_t draft = p.draft_token >= 0 && p.draft_token < vocab ? p.draft_token : -1;
      const int32_t id = verify_against_q(z, vocab, m, member, truncated, draft,
                                          draft_q + static_cast<int64_t>(p.draft_q_row) * vocab, u, sh);
      if (id >= 0) token = id;
    } else if (!truncated) {
      // The whole vocabulary, in id order (the CPU's draw_from_all).
      double partial = 0.0;
      for (int32_t i = tid; i < vocab; i += blockDim.x) partial += weight(i);
      total = block_sum(partial, sh);
      const double wx = x >= 0 ? weight(x) : 0.0;
      if (u * total < wx) {
        token = x;
      } else {
        const auto without_x = [=](int32_t i) { return i == x ? 0.0 : weight(i); };
        const int32_t drawn = scan_id_order(vocab, without_x, u * total - wx, true, sh);
        if (drawn >= 0) token = drawn;
      }
    } else {
      Bound kept = kEverything;
      if (use_top_k) {
        const Selection s = select_best_first(z, vocab, m, kept, 0u, false, p.top_k, false, sh);
        if (s.found) kept = s.bound;
      }
      if (use_top_p) {
        const Selection s = select_best_first(z, vocab, m, kept, 0u, true, p.top_p, false, sh);
        if (s.found) kept = s.bound;
      }
      // min-p is a logit threshold (probabilities relative to the best
      // token do not change under renormalisation); the best always passes.
      const uint32_t min_key = use_min_p ? order_key(m + p.log_min_p) : 0u;
      const bool x_kept = x >= 0 && order_key(z[x]) >= min_key && within(order_key(z[x]), x, kept);
      const double wx = x_kept ? static_cast<double>(sampling_exp_nonpositive(z[x] - m)) : 0.0;
      const Selection s = select_best_first(z, vocab, m, kept, min_key, true, u, true, sh, x_kept ? x : -1, wx);
      if (s.draft) token = x;
      else if (s.found) token = s.bound.id;  // else rounding left the target unreached: the argmax, as on the CPU
    }
  }

  if (logprobs == nullptr) {
    if (tid == 0) token_ids[row] = token;
    return;
  }
  SampledLogprob* out = logprobs + row * kSamplingLogprobsPerRow;  // [kSamplingLogprobsPerRow]
  const int num_top = p.num_logprobs < kSamplingMaxLogprobs ? p.num_logprobs : kSamplingMaxLogprobs;
  double log_normalizer = 0.0;
  if (p.num_logprobs >= 0) {
    if (total < 0.0) {
      double partial = 0.0;
      for (int32_t i = tid; i < vocab; i += blockDim.x) partial += weight(i);
      total = block_sum(partial, sh);
    }
    log_normalizer = static_cast<double>(m) + log(total);
  }
  if (num_top > 0) {
    const Selection s = select_best_first(z, vocab, m, kEverything, 0u, false, num_top, false, sh);
    const Bound top = s.found ? s.bound : kEverything;
    if (tid == 0) sh.num_top = 0;
    __syncthreads();
    for (int32_t i = tid; i < vocab; i += blockDim.x) {
      const float v = z[i];
      if (is_nan(v) || !within(order_key(v), i, top)) continue;
      const int slot = atomicAdd(&sh.num_top, 1);
      if (slot < kSamplingMaxLogprobs) {
        sh.top_value[slot] = v;
        sh.top_id[slot] = i;
      }
    }
    __syncthreads();
  }
  if (tid == 0) {
    token_ids[row] = token;
    int listed = 0;
    if (p.num_logprobs >= 0) {
      out[0] = {token, static_cast<float>(static_cast<double>(z[token]) - log_normalizer)};
      if (num_top > 0) {
        listed = sh.num_top < num_top ? sh.num_top : num_top;
        // At most kSamplingMaxLogprobs entries: insertion sort, best first.
        for (int a = 1; a < listed; ++a) {
          const Candidate c{sh.top_value[a], sh.top_id[a]};
          int j = a;
          for (; j > 0 && better(c, Candidate{sh.top_value[j - 1], sh.top_id[j - 1]}); --j) {
            sh.top_value[j] = sh.top_value[j - 1];
            sh.top_id[j] = sh.top_id[j - 1];
          }
          sh.top_value[j] = c.value;
          sh.top_id[j] = c.id;
        }
        for (int a = 0; a < listed; ++a) {
          out[1 + a] = {sh.top_id[a], static_cast<float>(static_cast<double>(sh.top_value[a]) - log_normalizer)};
        }
      }
    } else {
      out[0] = {-1, 0.0f};
    }
    for (int a = 1 + listed; a < kSamplingLogprobsPerRow; ++a) out[a] = {-1, 0.0f};
  }
}

}  // namespace

cudaError_t sample_rows(const float* logits, int64_t row_stride, int32_t num_rows, int32_t vocab,
                        const SamplingRowParams* params, const PenaltyState& penalties, float* workspace,
                        int32_t* token_ids, SampledLogprob* logprobs, cudaStream_t stream, const float* draft_q,
                        const uint32_t* token_masks) {
  if (num_rows < 0 || vocab <= 0 || row_stride < vocab || logits == nullptr || params == nullptr ||
      workspace == nullptr || token_ids == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (num_rows == 0) return cudaSuccess;
  // About 16 logits per thread, one warp at least, kSampleRowsMaxThreads at most.
  int threads = 32;
  while (threads < kSampleRowsMaxThreads && threads * 16 < vocab) threads *= 2;
  LLMK_LAUNCH(num_rows, threads, 0, stream, sample_rows_kernel)(logits, row_stride, vocab, params, penalties,
                                                                  workspace, token_ids, logprobs, draft_q,
                                                                  token_masks);
  return cudaPeekAtLastError();
}

}  // namespace llmk::cuda
