// kernels/cuda/attention_flash under the simulation, after kv_cache_write as
// the plugin runs them, against the float64 reference of
// attention_reference.hpp: GQA ratios (odd ones and one above a block's
// rows), block sizes, F16 / BF16 / I8 caches (F32 too), head_dim from 16 to
// 256, sliding windows, activation dtypes, steps mixing prefill chunks on
// cached prefixes, fresh prefills and decodes (whose output rows the kernel
// must leave alone), and a context of ~2600 tokens.
#include <cmath>
#include <vector>

#include "attention_reference.hpp"
#include "kernels/cuda/attention_flash.hpp"
#include "kernels/cuda/attention_paged.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;
namespace cuda = llmk::cuda;

namespace {

// The write, then the flash kernel with the given routing threshold.
attention_sink_launch flash_launch(int32_t min_query_len) {
  return [min_query_len](const cuda::PagedAttentionShape& shape, const cuda::PagedAttentionStep& step, const void* q,
                         const void* q_sink, const void* k, const void* v, const cuda::PagedKvCache& cache, void* out,
                         cudaStream_t stream) {
    if (const cudaError_t status = cuda::kv_cache_write(shape, step, k, v, cache, stream); status != cudaSuccess)
      return status;
    return cuda::attention_flash(shape, step, q, cache, out, stream, min_query_len, q_sink);
  };
}

// The kernel's error, in the terms of attention_tolerance (per output
// element: weights w_j, S_j = scale * sum_d |q_d k_jd|, n = keys seen).
// u is the operand's unit roundoff: 2^-11 for F16 operands (F16 cache),
// 2^-8 for BF16 (BF16, I8, F32 caches).
//   score:  q * scale * log2(e) is rounded to the operand (u per element);
//           K is rounded too unless the cache already holds the operand
//           type (F32: u; I8: the f32 product int8 * scale, 2^-24, then u);
//           the tensor cores sum head_dim products in f32 (allowing
//           truncation: 2^-23 per term, + 2 for the scale product).
//   weight: P = exp2(s - m) is rounded to the operand (u) before both P V
//           and the running sum take it, so the normalization is by the
//           same rounded weights; exp2f's few ulp and the f32 rounding of
//           s - m (2^-24 |s - m|, which matters only where |s - m| < ~64
//           and the weight is not negligible) add under 2^-17.
//   value:  V rounded like K (0 when the cache holds the operand type).
//   absolute: the f32 sums over n keys of P V (tensor cores, truncation
//           allowed: n 2^-23) and of P (n 2^-24), the rescales and the
//           division: n 2^-22 of the largest |v|; F16 operands also round
//           P below 2^-14 to F16's subnormal spacing (absolute 2^-25 per
//           weight, sum of weights >= 1): n 2^-24 more.
attention_tolerance flash_tolerance(const attention_case& c) {
  const bool f16 = c.kv_dtype == LLMK_DTYPE_F16;
  const double u = f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  const bool rounds_kv = c.kv_dtype == LLMK_DTYPE_F32 || c.kv_dtype == LLMK_DTYPE_I8;
  const double kv_rounding = rounds_kv ? u + std::ldexp(1.0, -24) : 0.0;
  int max_keys = 0;
  for (const auto& s : c.seqs) max_keys = std::max(max_keys, s.context_len);
  attention_tolerance t;
  t.score = u + kv_rounding * (1.0 + u) + (c.head_dim + 2) * std::ldexp(1.0, -23);
  t.weight = u + std::ldexp(1.0, -17);
  t.value = kv_rounding;
  t.absolute = max_keys * (std::ldexp(1.0, -22) + (f16 ? std::ldexp(1.0, -24) : 0.0));
  return t;
}

void check_flash_case(const attention_case& c, int32_t min_query_len = cuda::kFlashDefaultMinQueryLen) {
  check_attention_case(c, flash_launch(min_query_len), flash_tolerance(c),
                       [min_query_len](const seq_spec& s) { return s.query_len >= min_query_len; });
}

// A mixed step with short contexts: a decode, a prefill chunk on a cached
// prefix, a fresh prefill, a decode of a one-token context, a chunk longer
// than a block's tokens at group 1.
std::vector<seq_spec> mixed_short_step() { return {{37, 1}, {50, 7}, {21, 21}, {1, 1}, {90, 70}}; }

}  // namespace

TEST_CASE("Flash attention matches float64 over GQA ratios, block sizes, KV dtypes and sliding windows") {
  LLMK_SKIP_WHEN_SANITIZED(kSanitizedGridReason);
  // head_dim 16: small, as the simulation runs every WMMA product in every lane; head_dims have their own test.
  for_each_grid_case(mixed_short_step(), 16, {LLMK_DTYPE_F16, LLMK_DTYPE_BF16, LLMK_DTYPE_I8}, {0, 13}, 1100,
                     [](const attention_case& c) { check_flash_case(c); });
}

TEST_CASE("Flash attention matches float64 with several KV heads: GQA 8/4, 16/2 and 32/8") {
  LLMK_SKIP_WHEN_SANITIZED(kSanitizedGridReason);
  for_each_kv_heads_case(mixed_short_step(), 16, {LLMK_DTYPE_BF16, LLMK_DTYPE_I8}, {0, 13}, 1150,
                         [](const attention_case& c) { check_flash_case(c); });
}

TEST_CASE("Flash attention scores the sinks with q_sink, with and without a window, GQA up to 32/8") {
  LLMK_SKIP_WHEN_SANITIZED(kSanitizedGridReason);
  // A fresh 3-token prefill lies among the sinks (no keys after them), the
  // 21-token one starts there; the chunks on cached prefixes see the sinks
  // and then keys from the window's start (several tiles under GQA).
  for_each_sink_case({{37, 1}, {50, 7}, {21, 21}, {3, 3}, {60, 40}}, 16,
                     {LLMK_DTYPE_F16, LLMK_DTYPE_BF16, LLMK_DTYPE_I8}, 1700,
                     [](const attention_case& c) { check_flash_case(c); });
}

TEST_CASE("Flash attention handles head_dim 64, 80, 128 and 256 on F16, BF16 and I8 caches") {
  LLMK_SKIP_WHEN_SANITIZED(kSanitizedGridReason);
  std::uint64_t data_seed = 1200;
  for (const int head_dim : {64, 80, 128, 256})
    for (const llmk_dtype kv_dtype : {LLMK_DTYPE_F16, LLMK_DTYPE_BF16, LLMK_DTYPE_I8}) {
      attention_case c;
      c.num_heads = 8;
      c.num_kv_heads = 2;
      c.head_dim = head_dim;
      c.block_size = 16;
      c.kv_dtype = kv_dtype;
      c.kv_group_size = kv_dtype == LLMK_DTYPE_I8 ? 16 : 0;
      c.activation_dtype = LLMK_DTYPE_BF16;
      c.seqs = {{19, 1}, {40, 18}, {33, 33}};
      c.data_seed = ++data_seed;
      check_flash_case(c);
    }
}

TEST_CASE("Flash attention takes f32, bf16 and f16 activations over F32, F16, BF16 and I8 caches") {
  std::uint64_t data_seed = 1300;
  for (const llmk_dtype activation : {LLMK_DTYPE_F32, LLMK_DTYPE_BF16, LLMK_DTYPE_F16})
    for (const llmk_dtype kv_dtype : {LLMK_DTYPE_F32, LLMK_DTYPE_F16, LLMK_DTYPE_BF16, LLMK_DTYPE_I8}) {
      attention_case c;
      c.num_heads = 4;
      c.num_kv_heads = 2;
      c.head_dim = 40;  // padded to 48 in shared memory
      c.block_size = 16;
      c.activation_dtype = activation;
      c.kv_dtype = kv_dtype;
      c.kv_group_size = kv_dtype == LLMK_DTYPE_I8 ? 40 : 0;  // one group per head
      c.sliding_window = 9;
      c.seqs = {{30, 1}, {45, 20}};
      c.data_seed = ++data_seed;
      check_flash_case(c);
    }
}

TEST_CASE("Flash attention over odd GQA ratios and a group wider than a block's rows") {
  struct heads {
    int num_heads, num_kv_heads;
  };
  std::uint64_t data_seed = 1400;
  // Groups of 3 and 7 leave a block's last row unused; 5 KV heads of group 1;
  // a group of 72 takes a chunk of 64 heads and one of 8, one token per block.
  for (const heads h : {heads{6, 2}, heads{14, 2}, heads{5, 5}, heads{72, 1}}) {
    attention_case c;
    c.num_heads = h.num_heads;
    c.num_kv_heads = h.num_kv_heads;
    c.head_dim = 24;
    c.block_size = 16;
    c.kv_dtype = LLMK_DTYPE_BF16;
    c.sliding_window = h.num_heads == 14 ? 10 : 0;
    c.seqs = {{23, 1}, {40, 11}, {9, 9}};
    c.data_seed = ++data_seed;
    check_flash_case(c);
  }
}

TEST_CASE("Flash attention with sliding windows of 1 to 24 keys over tiles of 16 keys") {
  LLMK_SKIP_WHEN_SANITIZED(kSanitizedGridReason);
  // head_dim 144 takes tiles of 16 keys: the windows' first keys fall on
  // every offset of a tile, for the rows of each warp.
  std::uint64_t data_seed = 1450;
  for (int window = 1; window <= 24; ++window) {
    attention_case c;
    c.num_heads = 1;
    c.num_kv_heads = 1;
    c.head_dim = 144;
    c.block_size = 16;
    c.kv_dtype = LLMK_DTYPE_BF16;
    c.sliding_window = window;
    c.seqs = {{40, 20}, {37, 37}};
    c.data_seed = ++data_seed;
    check_flash_case(c);
  }
}

TEST_CASE("Flash attention over a ~2600-token context: a prefill chunk on a long prefix, window on and off") {
  LLMK_SKIP_WHEN_SANITIZED(kSanitizedGridReason);
  std::uint64_t data_seed = 1500;
  for (const int window : {0, 1000}) {
    attention_case c;
    c.num_heads = 2;
    c.num_kv_heads = 1;
    c.head_dim = 64;
    c.block_size = 16;
    c.kv_dtype = window == 0 ? LLMK_DTYPE_BF16 : LLMK_DTYPE_I8;
    c.kv_group_size = window == 0 ? 0 : 32;
    c.sliding_window = window;
    c.seqs = {{2611, 24}, {2000, 1}, {40, 40}};
    c.data_seed = ++data_seed;
    check_flash_case(c);
  }
}

TEST_CASE("Flash attention writes only the sequences with query_len >= min_query_len") {
  std::uint64_t data_seed = 1600;
  attention_case c;
  c.num_heads = 4;
  c.num_kv_heads = 1;
  c.head_dim = 16;
  c.block_size = 16;
  c.kv_dtype = LLMK_DTYPE_BF16;
  c.seqs = {{37, 1}, {50, 7}, {21, 21}, {12, 8}, {1, 1}};
  for (const int32_t min_query_len : {1, 2, 8, 22}) {  // 1: the decodes too; 22: nothing
    c.data_seed = ++data_seed;
    INFO("min_query_len " << min_query_len);
    check_flash_case(c, min_query_len);
  }
  c.seqs = {{37, 1}, {5, 1}, {1, 1}};  // decodes only: the default threshold writes nothing
  c.data_seed = ++data_seed;
  check_flash_case(c);
}

TEST_CASE("Flash attention rejects shapes and thresholds it cannot serve") {
  cuda::PagedAttentionShape shape{8, 3, 64, 0.125f, 0, cuda::DType::f32, cuda::DType::bf16};
  REQUIRE(cuda::check_flash_attention_shape(shape) == cudaErrorInvalidValue);  // 3 does not divide 8
  shape.num_kv_heads = 2;
  REQUIRE(cuda::check_flash_attention_shape(shape) == cudaSuccess);
  shape.head_dim = cuda::kFlashMaxHeadDim + 1;
  REQUIRE(cuda::check_flash_attention_shape(shape) == cudaErrorInvalidValue);
  shape.head_dim = 64;
  shape.kv_dtype = cuda::DType::i8;
  REQUIRE(cuda::check_flash_attention_shape(shape) == cudaErrorInvalidValue);  // I8 without a group size
  shape.kv_group_size = 16;
  REQUIRE(cuda::check_flash_attention_shape(shape) == cudaSuccess);
  cuda::PagedAttentionStep step;
  step.num_tokens = 1;
  step.num_seqs = 1;
  step.block_size = 16;
  // I8 without scales, then a threshold below 1.
  REQUIRE(cuda::attention_flash(shape, step, nullptr, cuda::PagedKvCache{}, nullptr, nullptr) == cudaErrorInvalidValue);
  shape.kv_dtype = cuda::DType::bf16;
  REQUIRE(cuda::attention_flash(shape, step, nullptr, cuda::PagedKvCache{}, nullptr, nullptr, 0) ==
          cudaErrorInvalidValue);
  step.num_tokens = 0;  // an empty step launches nothing
  REQUIRE(cuda::attention_flash(shape, step, nullptr, cuda::PagedKvCache{}, nullptr, nullptr) == cudaSuccess);
}
