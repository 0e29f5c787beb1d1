// kernels/cuda/attention_paged under the simulation: the KV write and the
// causal paged attention against the float64 reference of
// attention_reference.hpp, over GQA ratios, block sizes (shuffled,
// non-contiguous block tables), KV dtypes (I8 with several group sizes) and
// activation dtypes, sliding windows, and steps mixing prefill chunks on a
// cached prefix with decodes; contexts from 1 to ~3000 tokens.
#include <algorithm>
#include <vector>

#include "attention_reference.hpp"
#include "kernels/cuda/attention_paged.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;
namespace cuda = llmk::cuda;

namespace {

// Everything in f32: the f32 dot products (head_dim terms), exp of scores up
// to ~20 in magnitude (the GPU's __expf: <= ~25 ulp there), and f32 running
// sums of up to ~3000 weighted values with a rescale per tile of 128 keys;
// relative to the largest |v| the query sees. Observed ~1e-6 in the simulation.
constexpr attention_tolerance kAttentionF32Tolerance{5e-5, 0.0, 0.0, 0.0};

// Both launches, as the plugin runs them.
cudaError_t run_paged(const cuda::PagedAttentionShape& shape, const cuda::PagedAttentionStep& step, const void* q,
                      const void* q_sink, const void* k, const void* v, const cuda::PagedKvCache& cache, void* out,
                      cudaStream_t stream) {
  return cuda::attention_paged_run(shape, step, q, k, v, cache, out, stream, q_sink);
}

void check_attention_case(const attention_case& c) { check_attention_case(c, run_paged, kAttentionF32Tolerance); }

// A mixed step with short contexts: a decode, a prefill chunk on a cached
// prefix, a fresh prefill, a decode of a one-token context.
std::vector<seq_spec> mixed_short_step() { return {{37, 1}, {50, 7}, {5, 5}, {1, 1}}; }

}  // namespace

TEST_CASE("Paged attention matches float64 over GQA ratios, block sizes, KV dtypes and sliding windows") {
  LLMK_SKIP_WHEN_SANITIZED(kSanitizedGridReason);
  // head_dim 24: small, as the simulation tracks every shared-memory read; head_dims have their own test.
  for_each_grid_case(mixed_short_step(), 24, {LLMK_DTYPE_F32, LLMK_DTYPE_F16, LLMK_DTYPE_BF16, LLMK_DTYPE_I8},
                     {0, 6}, 100, [](const attention_case& c) { check_attention_case(c); });
}

TEST_CASE("Paged attention matches float64 with several KV heads: GQA 8/4, 16/2 and 32/8") {
  LLMK_SKIP_WHEN_SANITIZED(kSanitizedGridReason);
  for_each_kv_heads_case(mixed_short_step(), 16, {LLMK_DTYPE_BF16, LLMK_DTYPE_I8}, {0, 6}, 150,
                         [](const attention_case& c) { check_attention_case(c); });
}

TEST_CASE("Paged attention scores the sinks with q_sink, with and without a window, GQA up to 32/8") {
  // Rows among the sinks (a fresh 3-token prefill, a one-token context) and
  // contexts past the sinks and the window.
  for_each_sink_case({{37, 1}, {50, 7}, {3, 3}, {1, 1}}, 24, {LLMK_DTYPE_F32, LLMK_DTYPE_BF16, LLMK_DTYPE_I8}, 500,
                     [](const attention_case& c) { check_attention_case(c); });
}

TEST_CASE("Paged attention handles head_dim 8 to 256 with two KV heads") {
  std::uint64_t data_seed = 200;
  for (const int head_dim : {8, 64, 80, 128, 256}) {
    attention_case c;
    c.num_heads = 8;
    c.num_kv_heads = 2;
    c.head_dim = head_dim;
    c.block_size = 16;
    c.kv_dtype = LLMK_DTYPE_BF16;
    c.seqs = {{19, 1}, {40, 3}};
    c.data_seed = ++data_seed;
    check_attention_case(c);
  }
}

TEST_CASE("Paged attention with bf16 and f16 activations rounds only its output") {
  std::uint64_t data_seed = 300;
  for (const llmk_dtype activation : {LLMK_DTYPE_BF16, LLMK_DTYPE_F16})
    for (const llmk_dtype kv_dtype : {LLMK_DTYPE_F32, LLMK_DTYPE_F16, LLMK_DTYPE_BF16}) {
      attention_case c;
      c.num_heads = 4;
      c.num_kv_heads = 2;
      c.head_dim = 80;
      c.block_size = 16;
      c.activation_dtype = activation;
      c.kv_dtype = kv_dtype;
      c.sliding_window = 9;
      c.seqs = {{30, 1}, {21, 4}};
      c.data_seed = ++data_seed;
      check_attention_case(c);
    }
}

TEST_CASE("Paged attention reads I8 caches with groups of 8, 16, 32 and a whole head") {
  std::uint64_t data_seed = 350;
  for (const int group_size : {8, 16, 32, 64})
    for (const llmk_dtype activation : {LLMK_DTYPE_F32, LLMK_DTYPE_BF16}) {
      attention_case c;
      c.num_heads = 4;
      c.num_kv_heads = 2;
      c.head_dim = 64;
      c.block_size = 16;
      c.kv_dtype = LLMK_DTYPE_I8;
      c.kv_group_size = group_size;
      c.activation_dtype = activation;
      c.sliding_window = activation == LLMK_DTYPE_F32 ? 0 : 11;
      c.seqs = mixed_short_step();
      c.data_seed = ++data_seed;
      check_attention_case(c);
    }
}

TEST_CASE("Paged attention over contexts of ~3000 tokens, decode and a prefill chunk, window on and off") {
  LLMK_SKIP_WHEN_SANITIZED(kSanitizedGridReason);
  std::uint64_t data_seed = 400;
  for (const int block_size : {16, 0})
    for (const int window : {0, 1000}) {
      attention_case c;
      c.num_heads = 2;
      c.num_kv_heads = 1;
      c.head_dim = 64;
      c.block_size = block_size;
      c.kv_dtype = window == 0 ? LLMK_DTYPE_BF16 : LLMK_DTYPE_F32;
      c.sliding_window = window;
      c.seqs = {{3001, 1}, {2903, 2}};
      c.data_seed = ++data_seed;
      check_attention_case(c);
    }
}

TEST_CASE("The KV write stores rows at slot_mapping in every dtype pair and skips negative slots") {
  const int num_tokens = 9, num_kv_heads = 2, head_dim = 96, num_slots = 23, row = num_kv_heads * head_dim;
  const std::vector<int32_t> slot_mapping = {4, -1, 22, 0, 13, -5, 7, 8, 19};
  struct cache_format {
    llmk_dtype dtype;
    int group_size;
  };
  const cache_format formats[] = {{LLMK_DTYPE_F32, 0}, {LLMK_DTYPE_F16, 0},  {LLMK_DTYPE_BF16, 0}, {LLMK_DTYPE_I8, 8},
                                  {LLMK_DTYPE_I8, 16}, {LLMK_DTYPE_I8, 32}, {LLMK_DTYPE_I8, head_dim}};
  for (const llmk_dtype activation : {LLMK_DTYPE_F32, LLMK_DTYPE_F16, LLMK_DTYPE_BF16})
    for (const auto [kv_dtype, group_size] : formats) {
      const bool quantized = kv_dtype == LLMK_DTYPE_I8;
      auto kf = random_floats(static_cast<std::size_t>(num_tokens) * row, 501, -2.0f, 2.0f);
      if (quantized) {
        // An all-zero group: scale 0 and zero bytes.
        std::fill(kf.begin(), kf.begin() + group_size, 0.0f);
      } else {
        // f32 inputs beyond f16's range and below its normal range exercise the rounding.
        kf[0] = 70000.0f;
        kf[1] = 3e-6f;
      }
      const typed_values k = make_typed(activation, kf);
      const typed_values v = make_typed(activation, random_floats(kf.size(), 502, -2.0f, 2.0f));
      const auto init_f = random_floats(static_cast<std::size_t>(num_slots) * row, 503);
      const kv_cache_image before = make_kv_cache(kv_dtype, group_size, row, init_f, init_f);
      kv_cache_image after = before;
      std::vector<bool> written(num_slots, false);
      std::vector<float> k_row(row), v_row(row);
      for (int t = 0; t < num_tokens; ++t) {
        if (slot_mapping[t] < 0) continue;
        written[slot_mapping[t]] = true;
        for (int i = 0; i < row; ++i) {
          k_row[i] = static_cast<float>(k.value[static_cast<std::size_t>(t) * row + i]);
          v_row[i] = static_cast<float>(v.value[static_cast<std::size_t>(t) * row + i]);
        }
        after.store(slot_mapping[t], k_row.data(), v_row.data());
      }
      for (auto seed : seeds) {
        reset_simulator(seed);
        INFO("activation " << activation << " kv " << kv_dtype << " group " << group_size << " seed " << seed);
        device_buffer<uint8_t> dk(k.bytes), dv(v.bytes), dk_cache(before.k), dv_cache(before.v);
        device_buffer<float> dk_scale(quantized ? before.k_scale : std::vector<float>(1));
        device_buffer<float> dv_scale(quantized ? before.v_scale : std::vector<float>(1));
        device_buffer<int32_t> dslots(slot_mapping);
        const cuda::PagedAttentionShape shape{num_kv_heads, num_kv_heads, head_dim, 1.0f, 0,
                                              kernel_dtype(activation), kernel_dtype(kv_dtype), group_size};
        cuda::PagedAttentionStep step;
        step.num_tokens = num_tokens;
        step.slot_mapping = dslots.get();
        const cuda::PagedKvCache cache{dk_cache.get(), dv_cache.get(), quantized ? dk_scale.get() : nullptr,
                                       quantized ? dv_scale.get() : nullptr};
        CUDA_REQUIRE(cuda::kv_cache_write(shape, step, dk.get(), dv.get(), cache, nullptr));
        REQUIRE_NO_SIMULATED_RACES();
        require_cache(before, after, written, dk_cache.download(), dv_cache.download(),
                      quantized ? dk_scale.download() : std::vector<float>{},
                      quantized ? dv_scale.download() : std::vector<float>{});
      }
    }
}

TEST_CASE("Paged attention rejects shapes it cannot serve") {
  cuda::PagedAttentionShape shape{8, 3, 64, 0.125f, 0, cuda::DType::f32, cuda::DType::f32};
  REQUIRE(cuda::check_paged_attention_shape(shape) == cudaErrorInvalidValue);  // 3 does not divide 8
  shape.num_kv_heads = 2;
  REQUIRE(cuda::check_paged_attention_shape(shape) == cudaSuccess);
  shape.head_dim = cuda::kAttentionMaxHeadDim + 1;
  REQUIRE(cuda::check_paged_attention_shape(shape) == cudaErrorInvalidValue);
  shape.head_dim = 64;
  shape.kv_dtype = cuda::DType::i8;
  REQUIRE(cuda::check_paged_attention_shape(shape) == cudaErrorInvalidValue);  // I8 without a group size
  shape.kv_group_size = 48;
  REQUIRE(cuda::check_paged_attention_shape(shape) == cudaErrorInvalidValue);  // 48 does not divide 64
  shape.kv_group_size = 16;
  REQUIRE(cuda::check_paged_attention_shape(shape) == cudaSuccess);
  cuda::PagedAttentionStep step;
  step.num_tokens = 1;
  step.num_seqs = 1;
  step.block_size = 16;
  REQUIRE(cuda::attention_paged(shape, step, nullptr, cuda::PagedKvCache{}, nullptr, nullptr) == cudaErrorInvalidValue);
}
