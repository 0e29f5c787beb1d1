// One attention step through any attention plugin's C table, checked
// against a float64 reference: random paged block tables, mixed prefill
// chunks and decodes, F32, F16 and I8 caches. Shared by the attention.cpu
// tests and the conformance suite that runs every discovered plugin.
//
// The reference is softmax(q k^T * scale) v in double over what the cache
// holds after the step (only the last `sliding_window` positions up to the
// query's own when the problem sets a window) (dequantized for I8, widened for F16), so it checks
// the plugin's arithmetic exactly up to F32 rounding; what the plugin wrote
// for the new tokens is checked separately against the inputs, within the
// rounding its cache type allows (half an F16 unit, half an I8 step).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/aligned_buffer.hpp"
#include "plugins/api/llmk_attention.h"

namespace llmk::test {

struct AttentionProblem {
  uint32_t num_heads, num_kv_heads, head_dim;
  uint32_t block_size;
  std::vector<int32_t> new_tokens;  // per sequence
  std::vector<int32_t> context;     // per sequence, after the step
  uint32_t sliding_window = 0;      // 0: whole context; else a query at p sees (p - window, p]
};

struct AttentionOutcome {
  bool supported = true;   // false: supports() refused (why says why)
  std::string why;         // refusal reason, or the first failure
  double max_err = 0;      // largest |out - reference|; +inf for a missing or non-finite output
  bool cache_ok = true;    // the new tokens' K/V were stored within the cache type's rounding
  std::vector<float> out;  // the new tokens' outputs, [new tokens, num_heads, head_dim], batch order
};

// IEEE binary16 bits to a double (normal, subnormal, zero; no NaN/inf here).
inline double half_bits_to_double(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double magnitude = exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -magnitude : magnitude;
}

// Writes the cached positions with one step, then runs the new tokens in a
// second step and compares. A sequence's K/V and queries depend only on
// (seed, its index), not on the others, so the same sequence at the same
// index in two problems meets the same numbers. kv_dtype: LLMK_DTYPE_F32, F16 or I8 (i8_group
// values per scale).
inline AttentionOutcome check_attention_step(const llmk_attention_api& api, const AttentionProblem& p,
                                             uint32_t kv_dtype, uint32_t num_threads, uint64_t seed,
                                             uint32_t i8_group = 8) {
  AttentionOutcome result;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const uint32_t num_seqs = static_cast<uint32_t>(p.new_tokens.size());
  const int64_t hd = p.head_dim, kvh = p.num_kv_heads, nh = p.num_heads;

  // Paged layout: every sequence's blocks come from a shuffled pool.
  int64_t max_blocks = 0;
  for (int32_t c : p.context) max_blocks = std::max<int64_t>(max_blocks, (c + p.block_size - 1) / p.block_size);
  const int64_t pool = max_blocks * num_seqs + 3;
  std::vector<int32_t> blocks(pool);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<int32_t> tables(num_seqs * max_blocks, -1);
  for (uint32_t s = 0, next = 0; s < num_seqs; ++s)
    for (int64_t b = 0; b < (p.context[s] + p.block_size - 1) / p.block_size; ++b)
      tables[s * max_blocks + b] = blocks[next++] * static_cast<int32_t>(p.block_size);
  const uint32_t num_slots = static_cast<uint32_t>(pool * p.block_size);

  // Full K/V history per sequence, [context, kvh, hd].
  auto seq_rng = [seed](uint32_t s, uint64_t stream) { return std::mt19937_64(seed * 1000003u + s * 4u + stream); };
  std::vector<std::vector<float>> k_all(num_seqs), v_all(num_seqs);
  for (uint32_t s = 0; s < num_seqs; ++s) {
    std::mt19937_64 kv_rng = seq_rng(s, 0);
    normal.reset();  // no value cached from another sequence's draws
    k_all[s].resize(p.context[s] * kvh * hd);
    v_all[s].resize(p.context[s] * kvh * hd);
    for (auto& x : k_all[s]) x = normal(kv_rng);
    for (auto& x : v_all[s]) x = normal(kv_rng);
  }
  const bool i8 = kv_dtype == LLMK_DTYPE_I8, f16 = kv_dtype == LLMK_DTYPE_F16;
  const uint32_t group = i8 ? i8_group : 0;
  const size_t elems = static_cast<size_t>(num_slots) * kvh * hd;
  std::vector<float> kf(i8 || f16 ? 0 : elems), vf(i8 || f16 ? 0 : elems);
  std::vector<uint16_t> kh(f16 ? elems : 0), vh(f16 ? elems : 0);
  std::vector<int8_t> kq(i8 ? elems : 0), vq(i8 ? elems : 0);
  std::vector<float> ks(i8 ? elems / group : 0), vs(i8 ? elems / group : 0);
  void* k_cache = i8 ? static_cast<void*>(kq.data()) : f16 ? static_cast<void*>(kh.data()) : kf.data();
  void* v_cache = i8 ? static_cast<void*>(vq.data()) : f16 ? static_cast<void*>(vh.data()) : vf.data();
  llmk_kv_layer kv{k_cache, v_cache, i8 ? ks.data() : nullptr, i8 ? vs.data() : nullptr, num_slots};

  llmk_attention_desc desc{sizeof(llmk_attention_desc), p.num_heads, p.num_kv_heads, p.head_dim,
                           1.0f / std::sqrt(static_cast<float>(p.head_dim)), kv_dtype, group, 4096, 4096,
                           num_threads, "{}", p.sliding_window, LLMK_DEVICE_CPU, LLMK_DTYPE_F32,
                           num_seqs, p.block_size};
  char why[512] = {};
  if (api.supports(&desc, why, sizeof(why)) != 1) {
    result.supported = false;
    result.why = why;
    return result;
  }
  llmk_error err{};
  void* self = api.create(&desc, &err);
  if (self == nullptr) {
    result.why = std::string("create failed: ") + err.message;
    result.max_err = std::numeric_limits<double>::infinity();
    return result;
  }

  // This check reads the cache, so the plugin must declare the standard
  // layout, with exactly its sizes.
  llmk_kv_layout layout{};
  layout.struct_size = sizeof(layout);
  if (api.kv_layout(self, &layout, &err) != LLMK_OK) {
    result.why = std::string("kv_layout failed: ") + err.message;
    result.max_err = std::numeric_limits<double>::infinity();
    api.destroy(self);
    return result;
  }
  if (layout.kind != LLMK_KV_LAYOUT_STANDARD) {
    result.supported = false;
    result.why = "an opaque KV layout: this check reads the standard layout only";
    api.destroy(self);
    return result;
  }
  const uint64_t elem_bytes = i8 ? 1 : f16 ? 2 : 4, row_elems = static_cast<uint64_t>(kvh * hd);
  const uint64_t scale_bytes = i8 ? row_elems / group * 4 : 0;
  if (layout.k_bytes_per_slot != row_elems * elem_bytes || layout.v_bytes_per_slot != row_elems * elem_bytes ||
      layout.k_scale_bytes_per_slot != scale_bytes || layout.v_scale_bytes_per_slot != scale_bytes ||
      64 % std::max<uint32_t>(layout.alignment, 1) != 0) {
    result.why = "the declared standard KV layout has the wrong sizes per slot (" +
                 std::to_string(layout.k_bytes_per_slot) + " K bytes, expected " +
                 std::to_string(row_elems * elem_bytes) + ")";
    result.max_err = std::numeric_limits<double>::infinity();
    api.destroy(self);
    return result;
  }

  auto run_step = [&](const std::vector<int32_t>& first_pos, const std::vector<int32_t>& count,
                      std::vector<float>* q_out, std::vector<float>* out) {
    std::vector<int32_t> qs{0}, ctx, slots;
    std::vector<float> k, v, q;
    for (uint32_t s = 0; s < num_seqs; ++s) {
      std::mt19937_64 q_rng = seq_rng(s, first_pos[s] == 0 ? 1 : 2);
      normal.reset();
      for (int64_t i = 0; i < count[s] * nh * hd; ++i) q.push_back(normal(q_rng) * 2.0f);  // sharper softmax than unit scores
      for (int32_t i = 0; i < count[s]; ++i) {
        const int64_t pos = first_pos[s] + i;
        slots.push_back(tables[s * max_blocks + pos / p.block_size] + static_cast<int32_t>(pos % p.block_size));
        k.insert(k.end(), k_all[s].begin() + pos * kvh * hd, k_all[s].begin() + (pos + 1) * kvh * hd);
        v.insert(v.end(), v_all[s].begin() + pos * kvh * hd, v_all[s].begin() + (pos + 1) * kvh * hd);
      }
      qs.push_back(qs.back() + count[s]);
      ctx.push_back(first_pos[s] + count[s]);
    }
    const uint32_t n = static_cast<uint32_t>(slots.size());
    out->assign(q.size(), NAN);
    const llmk_attention_step step{sizeof(llmk_attention_step), n, num_seqs, static_cast<uint32_t>(max_blocks),
                                   p.block_size, num_slots, qs.data(), ctx.data(), slots.data(), tables.data(),
                                   qs.data(), ctx.data(), slots.data(), tables.data()};
    const llmk_attention_layer layer{sizeof(llmk_attention_layer), q.data(), k.data(), v.data(), out->data(), kv};
    *q_out = q;
    llmk_error step_err{};
    size_t workspace_bytes = 0;
    if (api.plan(self, &step, &workspace_bytes, &step_err) != LLMK_OK) {
      result.why = std::string("plan failed: ") + step_err.message;
      return false;
    }
    // Exactly what plan() asked for, so a plugin that writes past it trips
    // the sanitizers.
    const ::llmk::AlignedBuffer workspace(workspace_bytes, "a test workspace");
    if (api.run(self, &layer, workspace.data(), workspace_bytes, nullptr, &step_err) != LLMK_OK) {
      result.why = std::string("run failed: ") + step_err.message;
      return false;
    }
    return true;
  };

  std::vector<int32_t> zero(num_seqs, 0), cached(num_seqs), fresh(num_seqs);
  for (uint32_t s = 0; s < num_seqs; ++s) {
    cached[s] = p.context[s] - p.new_tokens[s];
    fresh[s] = p.new_tokens[s];
  }
  std::vector<float> q, out;
  // Positions already in the cache, written by an earlier step (skipped when
  // no sequence has any: a step needs at least one row).
  bool ok = true;
  if (std::any_of(cached.begin(), cached.end(), [](int32_t c) { return c > 0; })) ok = run_step(zero, cached, &q, &out);
  if (ok) ok = run_step(cached, fresh, &q, &out);
  if (!ok) {
    api.destroy(self);
    result.max_err = std::numeric_limits<double>::infinity();
    return result;
  }

  // What the cache holds for (sequence s, position pos, kv head h, lane i).
  auto stored = [&](const std::vector<int8_t>& qv, const std::vector<float>& sc, const std::vector<uint16_t>& hv,
                    const std::vector<float>& fv, uint32_t s, int64_t pos, int64_t h, int64_t i) -> double {
    const int64_t slot = tables[s * max_blocks + pos / p.block_size] + pos % p.block_size;
    const int64_t off = (slot * kvh + h) * hd + i;
    if (i8) return static_cast<double>(qv[off]) * sc[off / group];
    if (f16) return half_bits_to_double(hv[off]);
    return fv[off];
  };
  auto K = [&](uint32_t s, int64_t pos, int64_t h, int64_t i) { return stored(kq, ks, kh, kf, s, pos, h, i); };
  auto V = [&](uint32_t s, int64_t pos, int64_t h, int64_t i) { return stored(vq, vs, vh, vf, s, pos, h, i); };

  // Every stored value against the input it came from: exact for F32,
  // nearest half for F16, within half a step of a symmetric group scale of
  // at most max|group| / 127 for I8.
  for (uint32_t s = 0; s < num_seqs && result.cache_ok; ++s)
    for (int64_t pos = 0; pos < p.context[s] && result.cache_ok; ++pos)
      for (int64_t h = 0; h < kvh; ++h)
        for (int which = 0; which < 2; ++which) {
          const std::vector<float>& all = which == 0 ? k_all[s] : v_all[s];
          const float* in = &all[(pos * kvh + h) * hd];
          for (int64_t i = 0; i < hd; ++i) {
            const double exact = in[i], value = which == 0 ? K(s, pos, h, i) : V(s, pos, h, i);
            double bound = 0;
            if (i8) {
              double group_max = 0;
              const int64_t g0 = i - i % group;
              for (int64_t j = g0; j < g0 + group; ++j) group_max = std::max(group_max, std::fabs(double(in[j])));
              const int64_t slot = tables[s * max_blocks + pos / p.block_size] + pos % p.block_size;
              const double scale = (which == 0 ? ks : vs)[((slot * kvh + h) * hd + i) / group];
              bound = scale <= group_max / 127.0 * (1 + 1e-5) ? 0.5 * scale + 1e-6 * group_max : -1;
            } else if (f16) {
              bound = std::max(std::ldexp(std::fabs(exact), -11), std::ldexp(1.0, -25));
            }
            if (result.cache_ok && !(std::fabs(value - exact) <= bound)) {
              result.cache_ok = false;
              result.why = std::string(which == 0 ? "K" : "V") + " of sequence " + std::to_string(s) + " position " +
                           std::to_string(pos) + " head " + std::to_string(h) + " lane " + std::to_string(i) +
                           " is stored as " + std::to_string(value) + " for the input " + std::to_string(exact);
              break;
            }
          }
        }

  double max_err = 0.0;
  int64_t row = 0;
  for (uint32_t s = 0; s < num_seqs; ++s) {
    for (int32_t t = 0; t < p.new_tokens[s]; ++t, ++row) {
      const int64_t pos = cached[s] + t;
      const int64_t low = p.sliding_window == 0 ? 0 : std::max<int64_t>(0, pos - p.sliding_window + 1);
      for (int64_t h = 0; h < nh; ++h) {
        const int64_t g = h / (nh / kvh);
        std::vector<double> w(pos + 1 - low);  // w[j - low] for keys low .. pos
        double mx = -1e300;
        for (int64_t j = low; j <= pos; ++j) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i)
            d += static_cast<double>(q[(row * nh + h) * hd + i]) * K(s, j, g, i);
          w[j - low] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, w[j - low]);
        }
        double sum = 0;
        for (auto& x : w) sum += (x = std::exp(x - mx));
        for (int64_t i = 0; i < hd; ++i) {
          double ref = 0;
          for (int64_t j = low; j <= pos; ++j) ref += w[j - low] / sum * V(s, j, g, i);
          const double got = out[(row * nh + h) * hd + i];
          // A NaN or a row never written counts as an infinite error.
          const double e = std::isfinite(got) ? std::fabs(ref - got) : std::numeric_limits<double>::infinity();
          max_err = std::max(max_err, e);
        }
      }
    }
  }
  api.destroy(self);
  result.max_err = max_err;
  result.out = std::move(out);
  return result;
}

}  // namespace llmk::test
