// kernels/cuda/attention_paged under the simulation: the KV write and the
// causal paged attention against a float64 reference written here, over GQA
// ratios, block sizes (shuffled, non-contiguous block tables), KV and
// activation dtypes, sliding windows, and steps mixing prefill chunks on a
// cached prefix with decodes; contexts from 1 to ~3000 tokens.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "float_formats.hpp"
#include "kernels/cpu/convert.hpp"
#include "kernels/cuda/attention_paged.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;
namespace cuda = llmk::cuda;

namespace {

// f32 path: the f32 dot products (head_dim terms), exp of scores up to ~20
// in magnitude (the GPU's __expf: <= ~25 ulp there), and f32 running sums of
// up to ~3000 weighted values with a rescale per tile of 128 keys; relative
// to the largest |v| the query sees. Observed ~1e-6 in the simulation.
constexpr double kAttentionF32Tolerance = 5e-5;

// Values held in one of F32, F16, BF16: the bytes the device sees and the
// exact float64 value of each element.
struct typed_values {
  llmk_dtype dtype = LLMK_DTYPE_F32;
  std::vector<uint8_t> bytes;
  std::vector<double> value;
};

std::size_t element_size(llmk_dtype dtype) { return dtype == LLMK_DTYPE_F32 ? 4 : 2; }

typed_values make_typed(llmk_dtype dtype, const std::vector<float>& x) {
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

double decode_element(llmk_dtype dtype, const uint8_t* p) {
  if (dtype == LLMK_DTYPE_F32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return dtype == LLMK_DTYPE_BF16 ? decode_bf16(bits) : decode_f16(bits);
}

// x as the cache stores it (f32 holds every f32, f16 and bf16 value exactly).
double round_to(llmk_dtype dtype, double x) {
  return dtype == LLMK_DTYPE_F32 ? x : round_to_format(x, format_of(dtype));
}

struct seq_spec {
  int context_len;  // after this step
  int query_len;    // new tokens: the last query_len positions
};

struct attention_case {
  int num_heads = 1, num_kv_heads = 1, head_dim = 8;
  int block_size = 16;  // 0: one block covering the longest context
  llmk_dtype kv_dtype = LLMK_DTYPE_F32;
  llmk_dtype activation_dtype = LLMK_DTYPE_F32;
  int sliding_window = 0;
  std::vector<seq_spec> seqs;
  std::uint64_t data_seed = 1;
};

// Poison in slots no query may read (unused table entries point at a spare
// block, and the tail of each sequence's last block): large enough that
// reading one shows in the output.
constexpr float kPoisonK = 30.0f, kPoisonV = 512.0f;

// Builds the step, runs it under every seed and checks the cache and the output.
void check_attention_case(const attention_case& c) {
  const int num_seqs = static_cast<int>(c.seqs.size());
  int max_context = 0, num_tokens = 0;
  for (const auto& s : c.seqs) {
    max_context = std::max(max_context, s.context_len);
    num_tokens += s.query_len;
  }
  const int block_size = c.block_size > 0 ? c.block_size : max_context;
  std::vector<int> blocks_needed(num_seqs);
  int total_blocks = 0, max_blocks_per_seq = 1;
  for (int s = 0; s < num_seqs; ++s) {
    blocks_needed[s] = (c.seqs[s].context_len + block_size - 1) / block_size;
    total_blocks += blocks_needed[s];
    max_blocks_per_seq = std::max(max_blocks_per_seq, blocks_needed[s] + 1);  // one unused entry at least
  }
  const int num_spare_blocks = 2;
  const int num_blocks = total_blocks + num_spare_blocks;
  const int num_slots = num_blocks * block_size;

  // Shuffled physical blocks; unused table entries point at the last spare block.
  std::mt19937_64 rng(c.data_seed);
  std::vector<int> physical(num_blocks);
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  const int spare_block = physical.back();
  std::vector<int32_t> block_tables(static_cast<std::size_t>(num_seqs) * max_blocks_per_seq, spare_block * block_size);
  for (int s = 0, next = 0; s < num_seqs; ++s)
    for (int b = 0; b < blocks_needed[s]; ++b) block_tables[s * max_blocks_per_seq + b] = physical[next++] * block_size;
  auto slot_of = [&](int s, int p) { return block_tables[s * max_blocks_per_seq + p / block_size] + p % block_size; };

  std::vector<int32_t> query_start(num_seqs + 1, 0), context_lens(num_seqs);
  for (int s = 0; s < num_seqs; ++s) {
    query_start[s + 1] = query_start[s] + c.seqs[s].query_len;
    context_lens[s] = c.seqs[s].context_len;
  }

  const int row = c.num_kv_heads * c.head_dim;  // cache elements per slot
  const auto q_count = static_cast<std::size_t>(num_tokens) * c.num_heads * c.head_dim;
  const auto kv_count = static_cast<std::size_t>(num_tokens) * row;
  const typed_values q = make_typed(c.activation_dtype, random_floats(q_count, c.data_seed + 1, -4.0f, 4.0f));
  const typed_values k = make_typed(c.activation_dtype, random_floats(kv_count, c.data_seed + 2));
  const typed_values v = make_typed(c.activation_dtype, random_floats(kv_count, c.data_seed + 3));

  // The cache before the step: poison everywhere, the cached prefixes random.
  std::vector<float> k_cache_f(static_cast<std::size_t>(num_slots) * row, kPoisonK);
  std::vector<float> v_cache_f(k_cache_f.size(), kPoisonV);
  const auto prefix_k = random_floats(k_cache_f.size(), c.data_seed + 4), prefix_v = random_floats(k_cache_f.size(), c.data_seed + 5);
  std::vector<int32_t> slot_mapping(num_tokens);
  std::vector<bool> is_new_slot(num_slots, false);
  for (int s = 0; s < num_seqs; ++s) {
    const int first_new = c.seqs[s].context_len - c.seqs[s].query_len;
    for (int p = 0; p < first_new; ++p)
      for (int i = 0; i < row; ++i) {
        const std::size_t e = static_cast<std::size_t>(slot_of(s, p)) * row + i;
        k_cache_f[e] = prefix_k[e];
        v_cache_f[e] = prefix_v[e];
      }
    for (int i = 0; i < c.seqs[s].query_len; ++i) {
      slot_mapping[query_start[s] + i] = slot_of(s, first_new + i);
      is_new_slot[slot_of(s, first_new + i)] = true;
    }
  }
  const typed_values k_cache0 = make_typed(c.kv_dtype, k_cache_f), v_cache0 = make_typed(c.kv_dtype, v_cache_f);

  // Expected cache after the write: new slots hold the inputs rounded to the cache dtype.
  std::vector<double> k_after = k_cache0.value, v_after = v_cache0.value;
  for (int t = 0; t < num_tokens; ++t)
    for (int i = 0; i < row; ++i) {
      const std::size_t e = static_cast<std::size_t>(slot_mapping[t]) * row + i;
      k_after[e] = round_to(c.kv_dtype, k.value[static_cast<std::size_t>(t) * row + i]);
      v_after[e] = round_to(c.kv_dtype, v.value[static_cast<std::size_t>(t) * row + i]);
    }

  // float64 attention over the expected cache.
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  const int group = c.num_heads / c.num_kv_heads;
  std::vector<double> want(q_count), v_scale(q_count);
  std::vector<double> scores;
  for (int s = 0; s < num_seqs; ++s)
    for (int i = 0; i < c.seqs[s].query_len; ++i) {
      const int t = query_start[s] + i;
      const int p = c.seqs[s].context_len - c.seqs[s].query_len + i;
      const int first = c.sliding_window > 0 ? std::max(0, p - c.sliding_window + 1) : 0;
      for (int h = 0; h < c.num_heads; ++h) {
        const int kv_head = h / group;
        const double* qh = &q.value[(static_cast<std::size_t>(t) * c.num_heads + h) * c.head_dim];
        scores.assign(p - first + 1, 0.0);
        double max_score = -INFINITY;
        for (int j = first; j <= p; ++j) {
          const double* kj = &k_after[static_cast<std::size_t>(slot_of(s, j)) * row + kv_head * c.head_dim];
          double dot = 0.0;
          for (int d = 0; d < c.head_dim; ++d) dot += qh[d] * kj[d];
          scores[j - first] = dot * scale;
          max_score = std::max(max_score, scores[j - first]);
        }
        double sum = 0.0;
        for (double& sc : scores) sum += (sc = std::exp(sc - max_score));
        for (int d = 0; d < c.head_dim; ++d) {
          double acc = 0.0, largest = 0.0;
          for (int j = first; j <= p; ++j) {
            const double vj = v_after[static_cast<std::size_t>(slot_of(s, j)) * row + kv_head * c.head_dim + d];
            acc += scores[j - first] * vj;
            largest = std::max(largest, std::abs(vj));
          }
          const std::size_t e = (static_cast<std::size_t>(t) * c.num_heads + h) * c.head_dim + d;
          want[e] = acc / sum;
          v_scale[e] = largest;
        }
      }
    }

  const cuda::PagedAttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim, static_cast<float>(scale),
                                        c.sliding_window, c.activation_dtype, c.kv_dtype};
  const std::size_t act_size = element_size(c.activation_dtype), kv_size = element_size(c.kv_dtype);
  for (auto seed : seeds) {
    reset_simulator(seed);
    INFO("heads " << c.num_heads << "/" << c.num_kv_heads << " head_dim " << c.head_dim << " block " << block_size
                  << " kv dtype " << c.kv_dtype << " activation dtype " << c.activation_dtype << " window "
                  << c.sliding_window << " seed " << seed);
    device_buffer<uint8_t> dq(q.bytes), dk(k.bytes), dv(v.bytes), dk_cache(k_cache0.bytes), dv_cache(v_cache0.bytes);
    device_buffer<uint8_t> dout(q_count * act_size);
    device_buffer<int32_t> dquery_start(query_start), dcontext_lens(context_lens), dslots(slot_mapping),
        dtables(block_tables);
    const cuda::PagedAttentionStep step{num_tokens,          num_seqs,   max_blocks_per_seq, block_size,
                                        dquery_start.get(), dcontext_lens.get(), dslots.get(), dtables.get()};
    CUDA_REQUIRE(cuda::attention_paged_run(shape, step, dq.get(), dk.get(), dv.get(), cuda::PagedKvCache{dk_cache.get(), dv_cache.get()},
                                           dout.get(), nullptr));
    REQUIRE_NO_SIMULATED_RACES();

    // The cache: new slots equal the rounded inputs, every other byte untouched.
    const auto k_cache = dk_cache.download(), v_cache = dv_cache.download();
    for (int slot = 0; slot < num_slots; ++slot) {
      INFO("slot " << slot << (is_new_slot[slot] ? " (new)" : ""));
      const std::size_t begin = static_cast<std::size_t>(slot) * row * kv_size, end = begin + row * kv_size;
      if (!is_new_slot[slot]) {
        REQUIRE(std::equal(k_cache.begin() + begin, k_cache.begin() + end, k_cache0.bytes.begin() + begin));
        REQUIRE(std::equal(v_cache.begin() + begin, v_cache.begin() + end, v_cache0.bytes.begin() + begin));
        continue;
      }
      for (int i = 0; i < row; ++i) {
        const std::size_t e = static_cast<std::size_t>(slot) * row + i;
        REQUIRE(decode_element(c.kv_dtype, &k_cache[e * kv_size]) == k_after[e]);
        REQUIRE(decode_element(c.kv_dtype, &v_cache[e * kv_size]) == v_after[e]);
      }
    }

    // The output, with the activation dtype's rounding on top of the f32 error.
    const auto out = dout.download();
    const double out_rounding = c.activation_dtype == LLMK_DTYPE_F32 ? 0.0 : half_ulp(format_of(c.activation_dtype));
    for (std::size_t e = 0; e < q_count; ++e) {
      const double got = decode_element(c.activation_dtype, &out[e * act_size]);
      INFO("output element " << e << " (token " << e / (c.num_heads * c.head_dim) << ") got " << got << " want "
                             << want[e]);
      REQUIRE(std::abs(got - want[e]) <= kAttentionF32Tolerance * v_scale[e] + out_rounding * std::abs(want[e]) + 1e-30);
    }
  }
}

// A mixed step with short contexts: a decode, a prefill chunk on a cached
// prefix, a fresh prefill, a decode of a one-token context.
std::vector<seq_spec> mixed_short_step() { return {{37, 1}, {50, 7}, {5, 5}, {1, 1}}; }

}  // namespace

TEST_CASE("Paged attention matches float64 over GQA ratios, block sizes, KV dtypes and sliding windows") {
  std::uint64_t data_seed = 100;
  for (const int group : {1, 4, 8})
    for (const int block_size : {1, 16, 32, 0})
      for (const llmk_dtype kv_dtype : {LLMK_DTYPE_F32, LLMK_DTYPE_F16, LLMK_DTYPE_BF16})
        for (const int window : {0, 6}) {
          attention_case c;
          c.num_kv_heads = 1;
          c.num_heads = group;
          c.head_dim = 24;  // small: the simulation tracks every shared-memory read; head_dims have their own test
          c.block_size = block_size;
          c.kv_dtype = kv_dtype;
          c.sliding_window = window;
          c.seqs = mixed_short_step();
          c.data_seed = ++data_seed;
          check_attention_case(c);
        }
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

TEST_CASE("Paged attention over contexts of ~3000 tokens, decode and a prefill chunk, window on and off") {
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
  const int num_tokens = 9, num_kv_heads = 2, head_dim = 80, num_slots = 23, row = num_kv_heads * head_dim;
  const std::vector<int32_t> slot_mapping = {4, -1, 22, 0, 13, -5, 7, 8, 19};
  for (const llmk_dtype activation : {LLMK_DTYPE_F32, LLMK_DTYPE_F16, LLMK_DTYPE_BF16})
    for (const llmk_dtype kv_dtype : {LLMK_DTYPE_F32, LLMK_DTYPE_F16, LLMK_DTYPE_BF16}) {
      // f32 inputs beyond f16's range and below its normal range exercise the rounding.
      auto kf = random_floats(static_cast<std::size_t>(num_tokens) * row, 501, -2.0f, 2.0f);
      kf[0] = 70000.0f;
      kf[1] = 3e-6f;
      const typed_values k = make_typed(activation, kf);
      const typed_values v = make_typed(activation, random_floats(kf.size(), 502, -2.0f, 2.0f));
      const auto init = make_typed(kv_dtype, random_floats(static_cast<std::size_t>(num_slots) * row, 503));
      for (auto seed : seeds) {
        reset_simulator(seed);
        INFO("activation " << activation << " kv " << kv_dtype << " seed " << seed);
        device_buffer<uint8_t> dk(k.bytes), dv(v.bytes), dk_cache(init.bytes), dv_cache(init.bytes);
        device_buffer<int32_t> dslots(slot_mapping);
        const cuda::PagedAttentionShape shape{num_kv_heads, num_kv_heads, head_dim, 1.0f, 0, activation, kv_dtype};
        cuda::PagedAttentionStep step;
        step.num_tokens = num_tokens;
        step.slot_mapping = dslots.get();
        CUDA_REQUIRE(cuda::kv_cache_write(shape, step, dk.get(), dv.get(), cuda::PagedKvCache{dk_cache.get(), dv_cache.get()}, nullptr));
        const std::size_t kv_size = element_size(kv_dtype);
        for (const auto& [cache, input] : {std::pair{dk_cache.download(), &k}, std::pair{dv_cache.download(), &v}}) {
          std::vector<double> want = init.value;
          std::vector<bool> written(num_slots, false);
          for (int t = 0; t < num_tokens; ++t) {
            if (slot_mapping[t] < 0) continue;
            written[slot_mapping[t]] = true;
            for (int i = 0; i < row; ++i)
              want[static_cast<std::size_t>(slot_mapping[t]) * row + i] =
                  round_to(kv_dtype, input->value[static_cast<std::size_t>(t) * row + i]);
          }
          for (std::size_t e = 0; e < want.size(); ++e) {
            INFO("element " << e);
            if (written[e / row])
              REQUIRE(decode_element(kv_dtype, &cache[e * kv_size]) == want[e]);
            else
              REQUIRE(std::memcmp(&cache[e * kv_size], &init.bytes[e * kv_size], kv_size) == 0);
          }
        }
      }
    }
}

TEST_CASE("Paged attention rejects shapes it cannot serve") {
  cuda::PagedAttentionShape shape{8, 3, 64, 0.125f, 0, LLMK_DTYPE_F32, LLMK_DTYPE_F32};
  REQUIRE(cuda::check_paged_attention_shape(shape) == cudaErrorInvalidValue);  // 3 does not divide 8
  shape.num_kv_heads = 2;
  REQUIRE(cuda::check_paged_attention_shape(shape) == cudaSuccess);
  shape.head_dim = cuda::kAttentionMaxHeadDim + 1;
  REQUIRE(cuda::check_paged_attention_shape(shape) == cudaErrorInvalidValue);
  shape.head_dim = 64;
  shape.kv_dtype = LLMK_DTYPE_I8;
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
