// The float64 reference for the paged attention kernels (the semantics of
// plugins/api/llmk_attention.h), shared by the tests of every CUDA attention
// kernel: it builds one step of one layer from a list of sequences (shuffled
// block tables whose unused entries point at a poisoned block, cached
// prefixes, the new rows' slots), runs a kernel's launch under every seed,
// and checks
//   - the cache: the new slots hold the step's K/V rounded to the cache dtype
//     (I8: exactly the bytes and scales llmk::kernels::cpu::kv_quantize makes
//     of them), every other byte is unchanged;
//   - the output: within a stated bound of float64 attention over the cache
//     as expected after the write (I8: its dequantized values), and the rows
//     of sequences the kernel does not serve left as they were.
// The launch is a callable, so a kernel that reads a cache written by an
// earlier launch (kv_cache_write) runs both in it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <initializer_list>
#include <utility>
#include <vector>

#include "float_formats.hpp"
#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/kv_quant.hpp"
#include "kernels/cuda/attention_paged.hpp"
#include "support/skip.hpp"
#include "test_support.hpp"

namespace llmk::cudasim_test {

// The large shape grids of the attention kernels run in the release build
// only (LLMK_SKIP_WHEN_SANITIZED): the kernels are compiled without the
// sanitizers (the simulation's own bounds and race checks cover them there),
// and the smaller cases of each kernel still take the host side of a launch
// through the sanitized build.
inline constexpr const char* kSanitizedGridReason =
    "a grid through kernels the sanitizers do not instrument; smaller cases sanitize the launch path";

// Values held in one of F32, F16, BF16: the bytes the device sees and the
// exact float64 value of each element.
struct typed_values {
  llmk_dtype dtype = LLMK_DTYPE_F32;
  std::vector<uint8_t> bytes;
  std::vector<double> value;
};

inline std::size_t element_size(llmk_dtype dtype) {
  return dtype == LLMK_DTYPE_F32 ? 4 : dtype == LLMK_DTYPE_I8 ? 1 : 2;
}

// x in F32, F16 or BF16 (the bytes through the engine's conversions, the
// values decoded by float_formats.hpp).
inline typed_values make_typed(llmk_dtype dtype, const std::vector<float>& x) {
  typed_values t{dtype, std::vector<uint8_t>(x.size() * element_size(dtype)), std::vector<double>(x.size())};
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (dtype == LLMK_DTYPE_F32) {
      std::memcpy(&t.bytes[i * 4], &x[i], 4);
      t.value[i] = x[i];
      continue;
    }
    const uint16_t bits = dtype == LLMK_DTYPE_BF16 ? llmk::kernels::cpu::f32_to_bf16(x[i])
                                                   : llmk::kernels::cpu::f32_to_f16(x[i]);
    std::memcpy(&t.bytes[i * 2], &bits, 2);
    t.value[i] = dtype == LLMK_DTYPE_BF16 ? decode_bf16(bits) : decode_f16(bits);
  }
  return t;
}

// One element of F32, F16 or BF16.
inline double decode_element(llmk_dtype dtype, const uint8_t* p) {
  if (dtype == LLMK_DTYPE_F32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return dtype == LLMK_DTYPE_BF16 ? decode_bf16(bits) : decode_f16(bits);
}

// x as an F32, F16 or BF16 cache stores it (f32 holds every f32, f16 and bf16 value exactly).
inline double round_to(llmk_dtype dtype, double x) {
  return dtype == LLMK_DTYPE_F32 ? x : round_to_format(x, format_of(dtype));
}

// One layer's K/V cache on the host, in the device's layout.
struct kv_cache_image {
  llmk_dtype dtype = LLMK_DTYPE_F32;
  int row = 0;                           // elements per slot: num_kv_heads * head_dim
  int group_size = 0;                    // I8: elements per scale
  std::vector<uint8_t> k, v;             // [num_slots, row] of dtype
  std::vector<float> k_scale, v_scale;   // I8: [num_slots, row / group_size]; empty otherwise
  std::vector<double> k_value, v_value;  // [num_slots, row]: what attention reads (I8: int8 * scale)

  int num_groups() const { return dtype == LLMK_DTYPE_I8 ? row / group_size : 0; }

  // Stores one slot's rows (row floats each) as kv_cache_write should.
  void store(int slot, const float* k_row, const float* v_row) {
    store_one(k, k_scale, k_value, slot, k_row);
    store_one(v, v_scale, v_value, slot, v_row);
  }

 private:
  void store_one(std::vector<uint8_t>& bytes, std::vector<float>& scales, std::vector<double>& value, int slot,
                 const float* x) {
    const std::size_t first = static_cast<std::size_t>(slot) * row, size = element_size(dtype);
    if (dtype == LLMK_DTYPE_I8) {
      const std::size_t first_group = static_cast<std::size_t>(slot) * num_groups();
      auto* q = reinterpret_cast<int8_t*>(&bytes[first]);
      llmk::kernels::cpu::kv_quantize(x, q, &scales[first_group], 1, row, group_size);
      for (int i = 0; i < row; ++i) value[first + i] = static_cast<double>(q[i]) * scales[first_group + i / group_size];
      return;
    }
    const typed_values t = make_typed(dtype, std::vector<float>(x, x + row));
    std::memcpy(&bytes[first * size], t.bytes.data(), t.bytes.size());
    // The value from the format's definition, not from the bytes: the check
    // compares the device's bytes with it.
    for (int i = 0; i < row; ++i) value[first + i] = round_to(dtype, x[i]);
  }
};

// A cache of num_slots slots holding k, v: [num_slots, row].
inline kv_cache_image make_kv_cache(llmk_dtype dtype, int group_size, int row, const std::vector<float>& k,
                                    const std::vector<float>& v) {
  kv_cache_image cache;
  cache.dtype = dtype;
  cache.row = row;
  cache.group_size = group_size;
  const int num_slots = static_cast<int>(k.size() / row);
  cache.k.resize(k.size() * element_size(dtype));
  cache.v.resize(cache.k.size());
  cache.k_scale.resize(static_cast<std::size_t>(num_slots) * cache.num_groups());
  cache.v_scale.resize(cache.k_scale.size());
  cache.k_value.resize(k.size());
  cache.v_value.resize(k.size());
  for (int slot = 0; slot < num_slots; ++slot)
    cache.store(slot, &k[static_cast<std::size_t>(slot) * row], &v[static_cast<std::size_t>(slot) * row]);
  return cache;
}

// Requires the device cache (k, v and for I8 the scales) to equal `after` in
// the slots marked new (float dtypes: by value; I8: bytes and scales) and
// `before` byte for byte in every other slot.
inline void require_cache(const kv_cache_image& before, const kv_cache_image& after,
                          const std::vector<bool>& is_new_slot, const std::vector<uint8_t>& k,
                          const std::vector<uint8_t>& v,
                          const std::vector<float>& k_scale, const std::vector<float>& v_scale) {
  const std::size_t size = element_size(before.dtype), row_bytes = before.row * size;
  const int num_groups = before.num_groups();
  for (std::size_t slot = 0; slot < is_new_slot.size(); ++slot) {
    INFO("slot " << slot << (is_new_slot[slot] ? " (new)" : ""));
    const std::size_t begin = slot * row_bytes, end = begin + row_bytes;
    const std::size_t group_begin = slot * num_groups;
    const kv_cache_image& want = is_new_slot[slot] ? after : before;
    if (!is_new_slot[slot] || before.dtype == LLMK_DTYPE_I8) {
      REQUIRE(std::equal(k.begin() + begin, k.begin() + end, want.k.begin() + begin));
      REQUIRE(std::equal(v.begin() + begin, v.begin() + end, want.v.begin() + begin));
      if (num_groups == 0) continue;
      // Scales compared as bits (an all-zero group's scale is +0).
      REQUIRE(std::memcmp(&k_scale[group_begin], &want.k_scale[group_begin], num_groups * sizeof(float)) == 0);
      REQUIRE(std::memcmp(&v_scale[group_begin], &want.v_scale[group_begin], num_groups * sizeof(float)) == 0);
      continue;
    }
    for (int i = 0; i < before.row; ++i) {
      const std::size_t e = slot * before.row + i;
      REQUIRE(decode_element(before.dtype, &k[e * size]) == after.k_value[e]);
      REQUIRE(decode_element(before.dtype, &v[e * size]) == after.v_value[e]);
    }
  }
}

struct seq_spec {
  int context_len;  // after this step
  int query_len;    // new tokens: the last query_len positions
};

struct attention_case {
  int num_heads = 1, num_kv_heads = 1, head_dim = 8;
  int block_size = 16;  // 0: one block covering the longest context
  llmk_dtype kv_dtype = LLMK_DTYPE_F32;
  int kv_group_size = 0;  // I8 caches
  llmk_dtype activation_dtype = LLMK_DTYPE_F32;
  int sliding_window = 0;
  // Attention sinks: positions [0, sink_tokens) seen by every later query
  // whatever the window, scored with q_sink, random values of their own
  // (sink_queries false: no q_sink, q scores them).
  int sink_tokens = 0;
  bool sink_queries = true;
  std::vector<seq_spec> seqs;
  std::uint64_t data_seed = 1;
  // Keys [boost_first, boost_first + boost_count) of every sequence's cached
  // prefix set to boost * sign(q) of the sequence's last query (per KV head,
  // the first query head of its group): they outscore random keys by about
  // boost * mean|q| * sqrt(head_dim) for that query.
  int boost_first = 0, boost_count = 0;
  float boost = 0.0f;
};

// The grid every attention kernel's first test walks: GQA ratios 1, 4 and 8
// over one KV head, block sizes 1, 16, 32 and one block per sequence, the
// given cache dtypes (I8 with groups of 8) and sliding windows, on a
// mixed step `seqs`; check(c) for each case, each with its own data seed.
template <class Check>
void for_each_grid_case(const std::vector<seq_spec>& seqs, int head_dim, std::initializer_list<llmk_dtype> kv_dtypes,
                        std::initializer_list<int> windows, std::uint64_t data_seed, const Check& check) {
  for (const int group : {1, 4, 8})
    for (const int block_size : {1, 16, 32, 0})
      for (const llmk_dtype kv_dtype : kv_dtypes)
        for (const int window : windows) {
          attention_case c;
          c.num_kv_heads = 1;
          c.num_heads = group;
          c.head_dim = head_dim;
          c.block_size = block_size;
          c.kv_dtype = kv_dtype;
          c.kv_group_size = kv_dtype == LLMK_DTYPE_I8 ? 8 : 0;
          c.sliding_window = window;
          c.seqs = seqs;
          c.data_seed = ++data_seed;
          check(c);
        }
}

// Several KV heads (query heads / KV heads 8/4, 16/2 and 32/8: groups 2, 8
// and 4), so that a query head reading another group's KV head reads other
// keys; block size 16, the given cache dtypes (I8 with groups of 8) and
// windows, on the mixed step `seqs`.
template <class Check>
void for_each_kv_heads_case(const std::vector<seq_spec>& seqs, int head_dim,
                            std::initializer_list<llmk_dtype> kv_dtypes, std::initializer_list<int> windows,
                            std::uint64_t data_seed, const Check& check) {
  for (const auto& [num_heads, num_kv_heads] : {std::pair{8, 4}, std::pair{16, 2}, std::pair{32, 8}})
    for (const llmk_dtype kv_dtype : kv_dtypes)
      for (const int window : windows) {
        attention_case c;
        c.num_heads = num_heads;
        c.num_kv_heads = num_kv_heads;
        c.head_dim = head_dim;
        c.block_size = 16;
        c.kv_dtype = kv_dtype;
        c.kv_group_size = kv_dtype == LLMK_DTYPE_I8 ? 8 : 0;
        c.sliding_window = window;
        c.seqs = seqs;
        c.data_seed = ++data_seed;
        check(c);
      }
}

// Attention sinks (StreamingLLM): 4 sinks, without a window and with one of
// 6, over GQA 1 (block size 3, both) and 4 on one KV head, 8/4, 16/2 and
// 32/8 (block size 16, one each), cache dtypes taken in turn from kv_dtypes
// (I8 with groups of 8), each with its own q_sink; then one case whose q
// scores the sinks (no q_sink). The mixed step `seqs` should hold rows among
// the sinks, and contexts past the sinks plus the window.
template <class Check>
void for_each_sink_case(const std::vector<seq_spec>& seqs, int head_dim, std::initializer_list<llmk_dtype> kv_dtypes,
                        std::uint64_t data_seed, const Check& check) {
  struct layout {
    int num_heads, num_kv_heads, block_size, window;
  };
  std::size_t next_dtype = 0;
  for (const layout h : {layout{1, 1, 3, 0}, layout{1, 1, 3, 6}, layout{4, 1, 16, 6}, layout{8, 4, 16, 0},
                         layout{16, 2, 16, 6}, layout{32, 8, 16, 0}}) {
    attention_case c;
    c.num_heads = h.num_heads;
    c.num_kv_heads = h.num_kv_heads;
    c.head_dim = head_dim;
    c.block_size = h.block_size;
    c.kv_dtype = *(kv_dtypes.begin() + next_dtype++ % kv_dtypes.size());
    c.kv_group_size = c.kv_dtype == LLMK_DTYPE_I8 ? 8 : 0;
    c.sliding_window = h.window;
    c.sink_tokens = 4;
    c.seqs = seqs;
    c.data_seed = ++data_seed;
    check(c);
  }
  attention_case c;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = head_dim;
  c.kv_dtype = *kv_dtypes.begin();
  c.kv_group_size = c.kv_dtype == LLMK_DTYPE_I8 ? 8 : 0;
  c.sliding_window = 6;
  c.sink_tokens = 4;
  c.sink_queries = false;
  c.seqs = seqs;
  c.data_seed = ++data_seed;
  check(c);
}

// Poison in slots no query may read (unused table entries point at a spare
// block, and the tail of each sequence's last block): large enough that
// reading one shows in the output.
constexpr float kPoisonK = 30.0f, kPoisonV = 512.0f;

// One step built from an attention_case: the metadata, the inputs, and the
// cache before and (as expected) after the write.
struct attention_problem {
  int num_seqs = 0, num_tokens = 0, block_size = 0, max_blocks_per_seq = 0, num_slots = 0;
  int row = 0;  // cache elements per slot
  std::vector<int32_t> query_start, context_lens, slot_mapping, block_tables;
  std::vector<bool> is_new_slot;
  typed_values q, k, v;  // q: [num_tokens, num_heads, head_dim]; k, v: [num_tokens, row]
  typed_values q_sink;   // as q, with sinks and sink_queries; empty otherwise
  kv_cache_image cache_before, cache_after;

  int slot_of(int s, int p) const { return block_tables[s * max_blocks_per_seq + p / block_size] + p % block_size; }
};

inline attention_problem make_attention_problem(const attention_case& c) {
  attention_problem pb;
  pb.num_seqs = static_cast<int>(c.seqs.size());
  int max_context = 0;
  for (const auto& s : c.seqs) {
    max_context = std::max(max_context, s.context_len);
    pb.num_tokens += s.query_len;
  }
  pb.block_size = c.block_size > 0 ? c.block_size : max_context;
  std::vector<int> blocks_needed(pb.num_seqs);
  int total_blocks = 0;
  pb.max_blocks_per_seq = 1;
  for (int s = 0; s < pb.num_seqs; ++s) {
    blocks_needed[s] = (c.seqs[s].context_len + pb.block_size - 1) / pb.block_size;
    total_blocks += blocks_needed[s];
    pb.max_blocks_per_seq = std::max(pb.max_blocks_per_seq, blocks_needed[s] + 1);  // one unused entry at least
  }
  const int num_spare_blocks = 2;
  const int num_blocks = total_blocks + num_spare_blocks;
  pb.num_slots = num_blocks * pb.block_size;

  // Shuffled physical blocks; unused table entries point at the last spare block.
  std::mt19937_64 rng(c.data_seed);
  std::vector<int> physical(num_blocks);
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  const int spare_block = physical.back();
  pb.block_tables.assign(static_cast<std::size_t>(pb.num_seqs) * pb.max_blocks_per_seq, spare_block * pb.block_size);
  for (int s = 0, next = 0; s < pb.num_seqs; ++s)
    for (int b = 0; b < blocks_needed[s]; ++b)
      pb.block_tables[s * pb.max_blocks_per_seq + b] = physical[next++] * pb.block_size;

  pb.query_start.assign(pb.num_seqs + 1, 0);
  pb.context_lens.resize(pb.num_seqs);
  for (int s = 0; s < pb.num_seqs; ++s) {
    pb.query_start[s + 1] = pb.query_start[s] + c.seqs[s].query_len;
    pb.context_lens[s] = c.seqs[s].context_len;
  }

  pb.row = c.num_kv_heads * c.head_dim;
  const int row = pb.row;
  const auto q_count = static_cast<std::size_t>(pb.num_tokens) * c.num_heads * c.head_dim;
  const auto kv_count = static_cast<std::size_t>(pb.num_tokens) * row;
  pb.q = make_typed(c.activation_dtype, random_floats(q_count, c.data_seed + 1, -4.0f, 4.0f));
  pb.k = make_typed(c.activation_dtype, random_floats(kv_count, c.data_seed + 2));
  pb.v = make_typed(c.activation_dtype, random_floats(kv_count, c.data_seed + 3));
  if (c.sink_tokens > 0 && c.sink_queries)
    pb.q_sink = make_typed(c.activation_dtype, random_floats(q_count, c.data_seed + 6, -4.0f, 4.0f));

  // The cache before the step: poison everywhere, the cached prefixes random.
  std::vector<float> k_cache_f(static_cast<std::size_t>(pb.num_slots) * row, kPoisonK);
  std::vector<float> v_cache_f(k_cache_f.size(), kPoisonV);
  const auto prefix_k = random_floats(k_cache_f.size(), c.data_seed + 4);
  const auto prefix_v = random_floats(k_cache_f.size(), c.data_seed + 5);
  pb.slot_mapping.resize(pb.num_tokens);
  pb.is_new_slot.assign(pb.num_slots, false);
  for (int s = 0; s < pb.num_seqs; ++s) {
    const int first_new = c.seqs[s].context_len - c.seqs[s].query_len;
    for (int p = 0; p < first_new; ++p)
      for (int i = 0; i < row; ++i) {
        const std::size_t e = static_cast<std::size_t>(pb.slot_of(s, p)) * row + i;
        k_cache_f[e] = prefix_k[e];
        v_cache_f[e] = prefix_v[e];
      }
    for (int i = 0; i < c.seqs[s].query_len; ++i) {
      pb.slot_mapping[pb.query_start[s] + i] = pb.slot_of(s, first_new + i);
      pb.is_new_slot[pb.slot_of(s, first_new + i)] = true;
    }
    const int last_query = pb.query_start[s + 1] - 1, group = c.num_heads / c.num_kv_heads;
    if (last_query < pb.query_start[s]) continue;
    for (int p = c.boost_first; p < std::min(c.boost_first + c.boost_count, first_new); ++p)
      for (int g = 0; g < c.num_kv_heads; ++g)
        for (int d = 0; d < c.head_dim; ++d) {
          const double qd = pb.q.value[(static_cast<std::size_t>(last_query) * c.num_heads + g * group) * c.head_dim + d];
          k_cache_f[static_cast<std::size_t>(pb.slot_of(s, p)) * row + g * c.head_dim + d] = qd < 0 ? -c.boost : c.boost;
        }
  }
  pb.cache_before = make_kv_cache(c.kv_dtype, c.kv_group_size, row, k_cache_f, v_cache_f);

  // Expected cache after the write: the new slots hold the step's rows (the
  // activation values, exact in f32) stored in the cache dtype.
  pb.cache_after = pb.cache_before;
  std::vector<float> k_row(row), v_row(row);
  for (int t = 0; t < pb.num_tokens; ++t) {
    for (int i = 0; i < row; ++i) {
      k_row[i] = static_cast<float>(pb.k.value[static_cast<std::size_t>(t) * row + i]);
      v_row[i] = static_cast<float>(pb.v.value[static_cast<std::size_t>(t) * row + i]);
    }
    pb.cache_after.store(pb.slot_mapping[t], k_row.data(), v_row.data());
  }
  return pb;
}

// What a kernel may deviate from float64 attention, per output element
// (token t, head h, element d), where w_j are the float64 softmax weights of
// the keys j the query sees, v_j their V values, o = sum_j w_j v_j, and
// S_j = scale * sum_d |q_d k_jd|:
//
//   |got - o| <= absolute * max_j |v_j|
//              + sum_j w_j eta_j |v_j - o| / (1 - eta)
//              + value * sum_j w_j |v_j| * (1 + eta) / (1 - eta)
//              + the rounding of o to the activation dtype,
//   eta_j = exp(score * S_j) * (1 + weight) - 1,  eta = max_j eta_j.
//
// Why: a kernel whose scores carry a relative error of at most `score` per
// product term (|ds_j| <= score * S_j) and whose unnormalized weights
// exp(s_j - m) a further relative error of at most `weight`, normalized by
// the sum of those same weights, computes o' = sum_j w'_j v_j with
// w'_j = w_j (1 + eta_j') / (1 + mean_w(eta')), |eta_j'| <= eta_j; then
// o' - o = sum_j w_j eta_j' (v_j - o) / (1 + mean_w(eta')) exactly. V values
// carrying a relative error of at most `value` add at most value * sum_j w'_j |v_j|.
// `absolute` covers the f32 accumulation and the exp approximation.
struct attention_tolerance {
  double absolute = 0.0;
  double score = 0.0;
  double weight = 0.0;
  double value = 0.0;
};

// The float64 output and the bound of each element (without the output rounding).
struct attention_expectation {
  std::vector<double> want, bound;  // [num_tokens, num_heads, head_dim]
};

inline attention_expectation reference_attention(const attention_case& c, const attention_problem& pb,
                                                 const attention_tolerance& tolerance) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  const int group = c.num_heads / c.num_kv_heads, row = pb.row;
  const auto q_count = static_cast<std::size_t>(pb.num_tokens) * c.num_heads * c.head_dim;
  attention_expectation x{std::vector<double>(q_count), std::vector<double>(q_count)};
  const std::vector<double>& k_cache = pb.cache_after.k_value;
  const std::vector<double>& v_cache = pb.cache_after.v_value;
  std::vector<double> weights, eta;
  std::vector<std::size_t> v_rows;
  for (int s = 0; s < pb.num_seqs; ++s)
    for (int i = 0; i < c.seqs[s].query_len; ++i) {
      const int t = pb.query_start[s] + i;
      const int p = c.seqs[s].context_len - c.seqs[s].query_len + i;
      // The keys the query sees: the sinks (below min(sink_tokens, p + 1)),
      // then the window's from the sinks' end on.
      const int first = c.sliding_window > 0 ? std::max(0, p - c.sliding_window + 1) : 0;
      const int num_sinks = std::min(c.sink_tokens, p + 1);
      const int rest_first = std::max(first, c.sink_tokens);
      const int num_keys = num_sinks + std::max(0, p - rest_first + 1);
      const auto key_position = [&](int j) { return j < num_sinks ? j : rest_first + (j - num_sinks); };
      for (int h = 0; h < c.num_heads; ++h) {
        const int kv_head = h / group;
        const std::size_t q_at = (static_cast<std::size_t>(t) * c.num_heads + h) * c.head_dim;
        const double* q_row = &pb.q.value[q_at];
        const double* q_sink_row = pb.q_sink.value.empty() ? q_row : &pb.q_sink.value[q_at];
        weights.assign(num_keys, 0.0);
        eta.assign(num_keys, 0.0);
        v_rows.assign(num_keys, 0);
        double max_score = -INFINITY, max_eta = 0.0;
        for (int j = 0; j < num_keys; ++j) {
          const std::size_t slot_row =
              static_cast<std::size_t>(pb.slot_of(s, key_position(j))) * row + kv_head * c.head_dim;
          const double* kj = &k_cache[slot_row];
          const double* qh = j < num_sinks ? q_sink_row : q_row;
          double dot = 0.0, magnitude = 0.0;
          for (int d = 0; d < c.head_dim; ++d) {
            dot += qh[d] * kj[d];
            magnitude += std::abs(qh[d] * kj[d]);
          }
          weights[j] = dot * scale;
          eta[j] = std::exp(tolerance.score * magnitude * scale) * (1.0 + tolerance.weight) - 1.0;
          v_rows[j] = slot_row;
          max_score = std::max(max_score, weights[j]);
          max_eta = std::max(max_eta, eta[j]);
        }
        double sum = 0.0;
        for (double& w : weights) sum += (w = std::exp(w - max_score));
        for (double& w : weights) w /= sum;
        const double spread = max_eta < 1.0 ? 1.0 / (1.0 - max_eta) : std::numeric_limits<double>::infinity();
        for (int d = 0; d < c.head_dim; ++d) {
          double o = 0.0, largest = 0.0, weighted_magnitude = 0.0;
          for (int j = 0; j < num_keys; ++j) {
            const double vj = v_cache[v_rows[j] + d];
            o += weights[j] * vj;
            largest = std::max(largest, std::abs(vj));
            weighted_magnitude += weights[j] * std::abs(vj);
          }
          double deviation = 0.0;
          for (int j = 0; j < num_keys; ++j) deviation += weights[j] * eta[j] * std::abs(v_cache[v_rows[j] + d] - o);
          const std::size_t e = (static_cast<std::size_t>(t) * c.num_heads + h) * c.head_dim + d;
          x.want[e] = o;
          x.bound[e] = tolerance.absolute * largest + deviation * spread +
                       tolerance.value * weighted_magnitude * (1.0 + max_eta) * spread;
        }
      }
    }
  return x;
}

// The kernel (or kernels) under test, run on one step: the step's new k, v
// rows and the cache as kv_cache_write receives them; q and out as attention does.
using attention_launch = std::function<cudaError_t(
    const llmk::cuda::PagedAttentionShape& shape, const llmk::cuda::PagedAttentionStep& step, const void* q,
    const void* k, const void* v, const llmk::cuda::PagedKvCache& cache, void* out, cudaStream_t stream)>;

// The same with the queries that score the sinks (null without them).
using attention_sink_launch = std::function<cudaError_t(
    const llmk::cuda::PagedAttentionShape& shape, const llmk::cuda::PagedAttentionStep& step, const void* q,
    const void* q_sink, const void* k, const void* v, const llmk::cuda::PagedKvCache& cache, void* out,
    cudaStream_t stream)>;

// Whether the launch writes the output rows of a sequence; the rows of the
// others must keep their bytes. Empty: every sequence.
using attention_serves = std::function<bool(const seq_spec& seq)>;

// Builds the step, runs `launch` under every seed and checks the cache and the output.
inline void check_attention_case(const attention_case& c, const attention_sink_launch& launch,
                                 const attention_tolerance& tolerance, const attention_serves& serves = {}) {
  const attention_problem pb = make_attention_problem(c);
  const attention_expectation expected = reference_attention(c, pb, tolerance);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));

  const llmk::cuda::PagedAttentionShape shape{c.num_heads,
                                              c.num_kv_heads,
                                              c.head_dim,
                                              static_cast<float>(scale),
                                              c.sliding_window,
                                              kernel_dtype(c.activation_dtype),
                                              kernel_dtype(c.kv_dtype),
                                              c.kv_group_size,
                                              c.sink_tokens};
  const std::size_t act_size = element_size(c.activation_dtype);
  const std::size_t row_elements = static_cast<std::size_t>(c.num_heads) * c.head_dim;
  // The output before the launch: a byte pattern no result is likely to equal.
  const std::vector<uint8_t> out_before(pb.q.value.size() * act_size, 0xa7);
  std::vector<bool> row_served(pb.num_tokens, true);
  if (serves)
    for (int s = 0; s < pb.num_seqs; ++s)
      for (int t = pb.query_start[s]; t < pb.query_start[s + 1]; ++t) row_served[t] = serves(c.seqs[s]);
  const bool quantized = c.kv_dtype == LLMK_DTYPE_I8;
  for (auto seed : seeds) {
    reset_simulator(seed);
    INFO("heads " << c.num_heads << "/" << c.num_kv_heads << " head_dim " << c.head_dim << " block " << pb.block_size
                  << " kv dtype " << c.kv_dtype << " group " << c.kv_group_size << " activation dtype "
                  << c.activation_dtype << " window " << c.sliding_window << " sinks " << c.sink_tokens
                  << (c.sink_queries ? "" : " (no q_sink)") << " seed " << seed);
    device_buffer<uint8_t> dq(pb.q.bytes), dk(pb.k.bytes), dv(pb.v.bytes);
    // q_sink's buffer (one unused byte without one: the pointer stays null).
    const bool has_q_sink = !pb.q_sink.bytes.empty();
    device_buffer<uint8_t> dq_sink(has_q_sink ? pb.q_sink.bytes : std::vector<uint8_t>(1));
    device_buffer<uint8_t> dk_cache(pb.cache_before.k), dv_cache(pb.cache_before.v), dout(out_before);
    // An I8 cache's scales; one unused float otherwise (the pointers stay null).
    device_buffer<float> dk_scale(quantized ? pb.cache_before.k_scale : std::vector<float>(1));
    device_buffer<float> dv_scale(quantized ? pb.cache_before.v_scale : std::vector<float>(1));
    device_buffer<int32_t> dquery_start(pb.query_start), dcontext_lens(pb.context_lens), dslots(pb.slot_mapping),
        dtables(pb.block_tables);
    const llmk::cuda::PagedAttentionStep step{pb.num_tokens,      pb.num_seqs,         pb.max_blocks_per_seq,
                                              pb.block_size,      dquery_start.get(),  dcontext_lens.get(),
                                              dslots.get(),       dtables.get()};
    const llmk::cuda::PagedKvCache cache{dk_cache.get(), dv_cache.get(), quantized ? dk_scale.get() : nullptr,
                                         quantized ? dv_scale.get() : nullptr};
    CUDA_REQUIRE(launch(shape, step, dq.get(), has_q_sink ? dq_sink.get() : nullptr, dk.get(), dv.get(), cache,
                        dout.get(), nullptr));
    CUDA_REQUIRE(cudaDeviceSynchronize());
    REQUIRE_NO_SIMULATED_RACES();

    require_cache(pb.cache_before, pb.cache_after, pb.is_new_slot, dk_cache.download(), dv_cache.download(),
                  quantized ? dk_scale.download() : std::vector<float>{},
                  quantized ? dv_scale.download() : std::vector<float>{});

    // The output, with the activation dtype's rounding on top of the kernel's bound.
    const auto out = dout.download();
    const double out_rounding = c.activation_dtype == LLMK_DTYPE_F32 ? 0.0 : half_ulp(format_of(c.activation_dtype));
    for (std::size_t e = 0; e < expected.want.size(); ++e) {
      // The messages are built only for a failing element: there are many.
      const std::size_t token = e / row_elements;
      if (!row_served[token]) {
        const bool untouched = std::memcmp(&out[e * act_size], &out_before[e * act_size], act_size) == 0;
        if (untouched) continue;
        INFO("output element " << e << " (token " << token << ") belongs to a sequence the launch does not serve");
        REQUIRE(untouched);
      }
      const double got = decode_element(c.activation_dtype, &out[e * act_size]);
      const bool within =
          std::abs(got - expected.want[e]) <= expected.bound[e] + out_rounding * std::abs(expected.want[e]) + 1e-30;
      if (within) continue;
      INFO("output element " << e << " (token " << token << ") got " << got << " want " << expected.want[e]
                             << " bound " << expected.bound[e]);
      REQUIRE(within);
    }
    SUCCEED("every output element within its bound");
  }
}

// A launch that takes no q_sink (cases without sinks).
inline void check_attention_case(const attention_case& c, const attention_launch& launch,
                                 const attention_tolerance& tolerance, const attention_serves& serves = {}) {
  check_attention_case(
      c,
      [&launch](const llmk::cuda::PagedAttentionShape& shape, const llmk::cuda::PagedAttentionStep& step,
                const void* q, const void* /*q_sink*/, const void* k, const void* v,
                const llmk::cuda::PagedKvCache& cache, void* out, cudaStream_t stream) {
        return launch(shape, step, q, k, v, cache, out, stream);
      },
      tolerance, serves);
}

}  // namespace llmk::cudasim_test
