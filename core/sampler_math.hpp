// Numeric helpers of the sampler: a vectorisable exp, the counter-based
// hash behind its random numbers, and top-k selection.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace llmk::sampler_detail {

// exp(x) for x <= 0 (arguments are logit - max), written so loops over it
// vectorise: Cephes' polynomial on a range-reduced argument, relative error
// below 2e-7. Returns 0 below -87 (and for -inf), where float would go
// subnormal; such a token's weight is < 1.7e-38 of the best one's.
inline float exp_nonpositive(float x) {
  const float xc = std::max(x, -87.0f);
  const float n = std::floor(xc * 1.44269504088896341f + 0.5f);
  // x - n * ln2, with ln2 split in two for precision.
  const float r = xc - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x < -87.0f ? 0.0f : y * scale;
}

// splitmix64's finaliser: a bijective mix whose outputs pass BigCrush.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A scored token; `better` orders by logit, ties to the lower id.
struct Scored {
  float logit;
  int32_t id;
};
inline bool better(const Scored& a, const Scored& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// The k best of logits[0..n), best first, into `out` (its storage reused).
// NaN logits are never selected. A bounded heap for small k (most tokens
// fail one comparison against the heap's worst), nth_element otherwise.
inline void select_top_k(const float* logits, int32_t n, int32_t k, std::vector<Scored>& out) {
  out.clear();
  k = std::min(k, n);
  if (k <= 0) return;
  if (k <= 256) {
    // Max-heap under `better` reversed: the front is the worst kept.
    auto worse_first = [](const Scored& a, const Scored& b) { return better(a, b); };
    for (int32_t i = 0; i < n; ++i) {
      const float v = logits[i];
      if (std::isnan(v)) continue;
      if (static_cast<int32_t>(out.size()) < k) {
        out.push_back({v, i});
        std::push_heap(out.begin(), out.end(), worse_first);
      } else if (v > out.front().logit) {  // ties keep the earlier (lower) id
        std::pop_heap(out.begin(), out.end(), worse_first);
        out.back() = {v, i};
        std::push_heap(out.begin(), out.end(), worse_first);
      }
    }
  } else {
    out.reserve(n);
    for (int32_t i = 0; i < n; ++i) {
      if (!std::isnan(logits[i])) out.push_back({logits[i], i});
    }
    if (static_cast<int32_t>(out.size()) > k) {
      std::nth_element(out.begin(), out.begin() + (k - 1), out.end(), better);
      out.resize(k);
    }
  }
  std::sort(out.begin(), out.end(), better);
}

// A candidate token with its weight exp(logit - max).
struct Weighted {
  float logit;
  float weight;
  int32_t id;
};
inline bool better(const Weighted& a, const Weighted& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Reorders `c` so that its first k elements are the k best (under `better`,
// in no particular order) for the smallest k whose weights sum to at least
// `target`, and returns k (c.size() when even all fall short). A quickselect
// on mass instead of rank: expected O(n), no sort.
inline size_t select_top_mass(std::vector<Weighted>& c, double target) {
  // Invariant: c[0, lo) are the lo best, of mass `before` < target;
  // c[hi, n) are worse than everything before them; the answer is in (lo, hi].
  size_t lo = 0, hi = c.size();
  double before = 0.0;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    // Median of three as the pivot, parked at hi - 1.
    size_t a = lo, b = mid, d = hi - 1;
    if (better(c[b], c[a])) std::swap(a, b);
    if (better(c[d], c[b])) std::swap(b, d);
    if (better(c[b], c[a])) std::swap(a, b);
    std::swap(c[b], c[hi - 1]);
    const Weighted pivot = c[hi - 1];
    size_t split = lo;
    double mass_left = 0.0;
    for (size_t i = lo; i + 1 < hi; ++i) {
      if (better(c[i], pivot)) {
        mass_left += c[i].weight;
        std::swap(c[i], c[split++]);
      }
    }
    std::swap(c[split], c[hi - 1]);  // the pivot right after the better part
    if (before + mass_left >= target) {
      hi = split;
    } else {
      before += mass_left + pivot.weight;
      lo = split + 1;
      if (before >= target) return lo;
    }
  }
  return lo;
}

}  // namespace llmk::sampler_detail
