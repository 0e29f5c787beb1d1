// The engine's elementwise CUDA kernels (kernels/cuda/: convert, embedding,
// rmsnorm, rope, silu_mul) under the simulation, against float64 references
// written here, on odd sizes, under every seed; rope also against the CPU
// engine's own kernel.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/model_config.hpp"
#include "core/rope_scaling.hpp"
#include "float_formats.hpp"
#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/silu_mul.hpp"
#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/rmsnorm.hpp"
#include "kernels/cuda/rope.hpp"
#include "kernels/cuda/silu_mul.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;
namespace cuda = llmk::cuda;

namespace {

// f32 elementwise results that go through one or two roundings of f32
// arithmetic: a few f32 ulps (2^-24 each) relative.
constexpr double kF32ElementwiseTolerance = 4.0 * 0x1p-24;
// RMSNorm: f32 sum of up to ~4k squares (per-thread serial runs of dim/256
// terms, then a tree), a GPU rsqrtf (<= 2 ulp), two products. Observed ~1e-7.
constexpr double kF32RmsnormTolerance = 2e-6;
// silu_mul: __expf on the GPU is off by up to 2 + 1.16|x| ulp (x in [-12, 12]
// here: ~16 ulp ~ 1e-6 relative), then a division and a product.
constexpr double kSiluMulTolerance = 2e-6;

float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Inputs for the conversions: random values over many binades, values at and
// beyond the 16-bit formats' edges (overflow, subnormals, underflow to
// zero), exact ties for round-to-even, signed zeros and infinities.
std::vector<float> conversion_inputs() {
  std::vector<float> v = random_floats(1001, 5, -3.0f, 3.0f);
  const auto exponents = random_ints(v.size(), 6, -30, 30);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::ldexp(v[i], exponents[i]);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, 65504.0f, 65519.0f, 65520.0f, -70000.0f, 1e30f,
                            3e38f, 6.1e-5f, 5.96e-8f, 2.98e-8f, 2.9e-8f, 1e-9f, 1e-40f, -1e-42f,
                            bits_to_float(0x3f808000u),  // bf16 tie, even below: rounds down
                            bits_to_float(0x3f818000u),  // bf16 tie, odd below: rounds up
                            bits_to_float(0x3f801000u),  // f16 tie (13 dropped bits), even below
                            bits_to_float(0x3f803000u),  // f16 tie, odd below
                            bits_to_float(0x7f7fffffu)};  // FLT_MAX: bf16 infinity
  v.insert(v.end(), std::begin(specials), std::end(specials));
  return v;
}

bool same_value(double got, double want) {
  return got == want && std::signbit(got) == std::signbit(want);
}

}  // namespace

TEST_CASE("f32 to bf16 and f16 conversion rounds to nearest even like the format's definition") {
  const auto x = conversion_inputs();
  const auto n = static_cast<int64_t>(x.size());
  for (auto seed : seeds) {
    reset_simulator(seed);
    INFO("seed " << seed);
    device_buffer<float> dx(x);
    device_buffer<uint16_t> dbf16(x.size()), df16(x.size());
    CUDA_REQUIRE(cuda::convert_f32_to_bf16(dx.get(), reinterpret_cast<__nv_bfloat16*>(dbf16.get()), n, nullptr));
    CUDA_REQUIRE(cuda::convert_f32_to_f16(dx.get(), reinterpret_cast<__half*>(df16.get()), n, nullptr));
    const auto bf16 = dbf16.download(), f16 = df16.download();
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO("x " << x[i] << " bf16 bits " << bf16[i] << " f16 bits " << f16[i]);
      REQUIRE(same_value(decode_bf16(bf16[i]), round_to_format(x[i], kBf16Format)));
      REQUIRE(same_value(decode_f16(f16[i]), round_to_format(x[i], kF16Format)));
    }
  }
  // NaN stays NaN.
  device_buffer<float> dnan(std::vector<float>{NAN, -NAN});
  device_buffer<uint16_t> dout(2);
  CUDA_REQUIRE(cuda::convert_f32_to_bf16(dnan.get(), reinterpret_cast<__nv_bfloat16*>(dout.get()), 2, nullptr));
  for (uint16_t bits : dout.download()) REQUIRE(std::isnan(decode_bf16(bits)));
  CUDA_REQUIRE(cuda::convert_f32_to_f16(dnan.get(), reinterpret_cast<__half*>(dout.get()), 2, nullptr));
  for (uint16_t bits : dout.download()) REQUIRE(std::isnan(decode_f16(bits)));
}

TEST_CASE("bf16 and f16 to f32 conversion is exact for every 16-bit pattern") {
  std::vector<uint16_t> patterns(65536);
  for (std::size_t i = 0; i < patterns.size(); ++i) patterns[i] = static_cast<uint16_t>(i);
  const auto n = static_cast<int64_t>(patterns.size());
  for (auto seed : {seeds.front(), seeds.back()}) {  // no barriers: the order cannot matter; two seeds suffice
    reset_simulator(seed);
    device_buffer<uint16_t> dbits(patterns);
    device_buffer<float> dbf16(patterns.size()), df16(patterns.size());
    CUDA_REQUIRE(cuda::convert_bf16_to_f32(reinterpret_cast<const __nv_bfloat16*>(dbits.get()), dbf16.get(), n, nullptr));
    CUDA_REQUIRE(cuda::convert_f16_to_f32(reinterpret_cast<const __half*>(dbits.get()), df16.get(), n, nullptr));
    const auto from_bf16 = dbf16.download(), from_f16 = df16.download();
    for (std::size_t i = 0; i < patterns.size(); ++i) {
      INFO("bits " << i);
      const double want_bf16 = decode_bf16(patterns[i]), want_f16 = decode_f16(patterns[i]);
      if (std::isnan(want_bf16))
        REQUIRE(std::isnan(from_bf16[i]));
      else
        REQUIRE(same_value(from_bf16[i], want_bf16));
      if (std::isnan(want_f16))
        REQUIRE(std::isnan(from_f16[i]));
      else
        REQUIRE(same_value(from_f16[i], want_f16));
    }
  }
  CUDA_REQUIRE(cuda::convert_f16_to_f32(nullptr, nullptr, 0, nullptr));  // empty: nothing launched
}

TEST_CASE("Embedding gathers f32, f16 and bf16 rows and counts out-of-range ids without writing them") {
  const int64_t vocab = 37, dim = 67;
  const std::vector<int32_t> ids = {5, 0, 36, -1, 5, 37, 12, 1000000};
  const auto num_tokens = static_cast<int64_t>(ids.size());
  const auto values = random_floats(static_cast<std::size_t>(vocab * dim), 21, -4.0f, 4.0f);
  constexpr float kUntouched = -12345.0f;
  for (const llmk_dtype dtype : {LLMK_DTYPE_F32, LLMK_DTYPE_F16, LLMK_DTYPE_BF16}) {
    // The table in its dtype, and the float64 value of each element.
    std::vector<float> table_f32 = values;
    std::vector<uint16_t> table_16(values.size());
    std::vector<double> table_value(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (dtype == LLMK_DTYPE_BF16) table_16[i] = llmk::kernels::cpu::f32_to_bf16(values[i]);
      if (dtype == LLMK_DTYPE_F16) table_16[i] = llmk::kernels::cpu::f32_to_f16(values[i]);
      table_value[i] = dtype == LLMK_DTYPE_F32  ? double{values[i]}
                       : dtype == LLMK_DTYPE_F16 ? decode_f16(table_16[i])
                                                 : decode_bf16(table_16[i]);
    }
    for (auto seed : seeds) {
      reset_simulator(seed);
      INFO("dtype " << dtype << " seed " << seed);
      device_buffer<float> dtable_f32(table_f32);
      device_buffer<uint16_t> dtable_16(table_16);
      const void* table = dtype == LLMK_DTYPE_F32 ? static_cast<const void*>(dtable_f32.get()) : dtable_16.get();
      device_buffer<int32_t> dids(ids), dinvalid(std::vector<int32_t>{0});
      device_buffer<float> dhidden(std::vector<float>(static_cast<std::size_t>(num_tokens * dim), kUntouched));
      CUDA_REQUIRE(cuda::embedding(table, kernel_dtype(dtype), vocab, dim, dids.get(), num_tokens, dhidden.get(),
                                   dinvalid.get(), nullptr));
      REQUIRE(dinvalid.download()[0] == 3);
      const auto hidden = dhidden.download();
      for (int64_t t = 0; t < num_tokens; ++t)
        for (int64_t i = 0; i < dim; ++i) {
          INFO("token " << t << " element " << i);
          const bool valid = ids[t] >= 0 && ids[t] < vocab;
          REQUIRE(hidden[t * dim + i] == (valid ? table_value[ids[t] * dim + i] : kUntouched));
        }
    }
  }
  device_buffer<int32_t> dids(ids);
  device_buffer<float> dhidden(static_cast<std::size_t>(num_tokens * dim));
  REQUIRE(cuda::embedding(nullptr, cuda::DType::i8, vocab, dim, dids.get(), num_tokens, dhidden.get(), nullptr,
                          nullptr) == cudaErrorInvalidValue);
}

TEST_CASE("Fed-back ids land on their rows from the previous step's rows, and ids outside the vocabulary become 0") {
  const int64_t vocab = 50;
  // 300 rows: more than one pass of the block's 128 threads.
  const int32_t count = 300;
  std::vector<int32_t> previous_ids(count + 5), rows(count), previous_rows(count);
  for (int32_t i = 0; i < count + 5; ++i) previous_ids[i] = (i * 7) % 60 - 5;  // some negative, some >= vocab
  for (int32_t i = 0; i < count; ++i) {
    rows[i] = 2 * i;                         // every other row of the step
    previous_rows[i] = (i * 13 + 3) % (count + 5);
  }
  constexpr int32_t kUntouched = -7;
  for (auto seed : seeds) {
    reset_simulator(seed);
    device_buffer<int32_t> dids(std::vector<int32_t>(2 * count, kUntouched)), drows(rows), dprev_rows(previous_rows),
        dprev_ids(previous_ids);
    CUDA_REQUIRE(cuda::gather_fed_back_ids(dids.get(), drows.get(), dprev_rows.get(), count, dprev_ids.get(), vocab,
                                           nullptr));
    const auto ids = dids.download();
    for (int32_t i = 0; i < count; ++i) {
      INFO("fed-back entry " << i);
      const int32_t want = previous_ids[previous_rows[i]];
      REQUIRE(ids[2 * i] == (want >= 0 && want < vocab ? want : 0));
      REQUIRE(ids[2 * i + 1] == kUntouched);  // rows not fed back keep their ids
    }
  }
  CHECK(cuda::gather_fed_back_ids(nullptr, nullptr, nullptr, 0, nullptr, vocab, nullptr) == cudaSuccess);
  CHECK(cuda::gather_fed_back_ids(nullptr, nullptr, nullptr, -1, nullptr, vocab, nullptr) == cudaErrorInvalidValue);
}

TEST_CASE("RMSNorm with and without the residual add matches float64 for odd row lengths and every weight dtype") {
  const float eps = 1e-5f;
  const int64_t num_rows = 3;
  for (const int64_t dim : {1, 3, 67, 4097})
    for (const llmk_dtype weight_dtype : {LLMK_DTYPE_F32, LLMK_DTYPE_BF16, LLMK_DTYPE_F16})
      for (const bool add_residual : {false, true}) {
        const auto size = static_cast<std::size_t>(num_rows * dim);
        const auto hidden_in = random_floats(size, 31 + dim, -2.0f, 2.0f);
        const auto x = random_floats(size, 32 + dim, -2.0f, 2.0f);
        const auto weight_f32 = random_floats(static_cast<std::size_t>(dim), 33 + dim, 0.5f, 1.5f);
        std::vector<uint16_t> weight_16(weight_f32.size());
        std::vector<double> weight(weight_f32.size());
        for (std::size_t i = 0; i < weight.size(); ++i) {
          if (weight_dtype == LLMK_DTYPE_BF16) weight_16[i] = llmk::kernels::cpu::f32_to_bf16(weight_f32[i]);
          if (weight_dtype == LLMK_DTYPE_F16) weight_16[i] = llmk::kernels::cpu::f32_to_f16(weight_f32[i]);
          weight[i] = weight_dtype == LLMK_DTYPE_F32    ? double{weight_f32[i]}
                      : weight_dtype == LLMK_DTYPE_BF16 ? decode_bf16(weight_16[i])
                                                        : decode_f16(weight_16[i]);
        }
        // float64 reference; the residual sum is rounded to f32 as the kernel stores it.
        std::vector<float> want_hidden = hidden_in;
        std::vector<double> want(size);
        for (int64_t r = 0; r < num_rows; ++r) {
          double sum_squares = 0.0;
          for (int64_t i = 0; i < dim; ++i) {
            float& h = want_hidden[r * dim + i];
            if (add_residual) h = static_cast<float>(double{h} + x[r * dim + i]);
            sum_squares += double{h} * h;
          }
          const double inv_rms = 1.0 / std::sqrt(sum_squares / dim + eps);
          for (int64_t i = 0; i < dim; ++i) want[r * dim + i] = want_hidden[r * dim + i] * inv_rms * weight[i];
        }
        for (auto seed : seeds) {
          reset_simulator(seed);
          INFO("dim " << dim << " weight dtype " << weight_dtype << " residual " << add_residual << " seed " << seed);
          device_buffer<float> dhidden(hidden_in), dx(x), dout(size), dweight_f32(weight_f32);
          device_buffer<uint16_t> dweight_16(weight_16);
          const void* w = weight_dtype == LLMK_DTYPE_F32 ? static_cast<const void*>(dweight_f32.get())
                                                         : dweight_16.get();
          CUDA_REQUIRE(cuda::rmsnorm(dhidden.get(), add_residual ? dx.get() : nullptr, w, kernel_dtype(weight_dtype),
                                     dout.get(), num_rows, dim, eps, nullptr));
          REQUIRE_NO_SIMULATED_RACES();
          REQUIRE(dhidden.download() == want_hidden);
          const auto out = dout.download();
          for (std::size_t i = 0; i < size; ++i) {
            INFO("element " << i << " got " << out[i] << " want " << want[i]);
            REQUIRE(std::abs(out[i] - want[i]) <= kF32RmsnormTolerance * std::abs(want[i]) + 1e-30);
          }
          // out aliasing hidden (no residual): the in-place norm gives the same values.
          if (!add_residual) {
            CUDA_REQUIRE(cuda::rmsnorm(dhidden.get(), nullptr, w, kernel_dtype(weight_dtype), dhidden.get(), num_rows,
                                       dim, eps, nullptr));
            REQUIRE(dhidden.download() == out);
          }
        }
      }
}

TEST_CASE("RoPE in place on strided q and k matches float64 and the CPU engine's rope") {
  const int64_t num_tokens = 5, num_heads = 3, num_kv_heads = 2, max_positions = 4099;
  for (const int64_t head_dim : {2, 6, 64, 128}) {
    const int64_t half = head_dim / 2;
    // A fused qkv row per token: q heads, k heads, v heads; rope touches q and k only.
    const int64_t row = (num_heads + 2 * num_kv_heads) * head_dim;
    const auto qkv = random_floats(static_cast<std::size_t>(num_tokens * row), 41 + head_dim, -2.0f, 2.0f);
    std::vector<int32_t> positions = random_ints(num_tokens, 42, 0, static_cast<int>(max_positions - 1));
    positions[0] = 0;
    positions[1] = static_cast<int32_t>(max_positions - 1);
    std::vector<float> cos_table(static_cast<std::size_t>(max_positions * half)), sin_table(cos_table.size());
    llmk::kernels::cpu::rope_tables(10000.0, head_dim, max_positions, cos_table.data(), sin_table.data());

    // float64 reference from the same tables: element i pairs with i + half.
    std::vector<double> want(qkv.begin(), qkv.end());
    std::vector<double> pair_scale(qkv.size(), 0.0);  // |x1| + |x2| of the pair an element came from
    for (int64_t t = 0; t < num_tokens; ++t)
      for (int64_t h = 0; h < num_heads + num_kv_heads; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const int64_t a = t * row + h * head_dim + i, b = a + half;
          const double c = cos_table[positions[t] * half + i], s = sin_table[positions[t] * half + i];
          want[a] = double{qkv[a]} * c - double{qkv[b]} * s;
          want[b] = double{qkv[b]} * c + double{qkv[a]} * s;
          pair_scale[a] = pair_scale[b] = std::abs(qkv[a]) + std::abs(qkv[b]);
        }
    // The CPU engine's kernel (out of place, same strides).
    std::vector<float> cpu = qkv;
    llmk::kernels::cpu::rope(qkv.data(), row, cpu.data(), row, num_tokens, num_heads, head_dim, positions.data(),
                             cos_table.data(), sin_table.data());
    llmk::kernels::cpu::rope(qkv.data() + num_heads * head_dim, row, cpu.data() + num_heads * head_dim, row,
                             num_tokens, num_kv_heads, head_dim, positions.data(), cos_table.data(), sin_table.data());

    for (auto seed : seeds) {
      reset_simulator(seed);
      INFO("head_dim " << head_dim << " seed " << seed);
      device_buffer<float> dqkv(qkv), dcos(cos_table), dsin(sin_table);
      device_buffer<int32_t> dpositions(positions);
      CUDA_REQUIRE(cuda::rope(dqkv.get(), row, num_heads, dqkv.get() + num_heads * head_dim, row, num_kv_heads,
                              num_tokens, head_dim, dpositions.get(), dcos.get(), dsin.get(), nullptr));
      const auto got = dqkv.download();
      for (std::size_t i = 0; i < got.size(); ++i) {
        INFO("element " << i << " got " << got[i] << " want " << want[i] << " cpu " << cpu[i]);
        const double tolerance = kF32ElementwiseTolerance * pair_scale[i];
        REQUIRE(std::abs(got[i] - want[i]) <= tolerance);  // v elements: pair_scale 0, must be unchanged
        REQUIRE(std::abs(got[i] - cpu[i]) <= 2.0 * tolerance);
      }
    }
  }
  REQUIRE(cuda::rope(nullptr, 0, 1, nullptr, 0, 0, 1, 5, nullptr, nullptr, nullptr, nullptr) == cudaErrorInvalidValue);
}

TEST_CASE("RoPE past its tables rotates by the angles core's tables would hold there (StreamingLLM positions)") {
  // Tables of 8 positions; rows at 0..7 read them, rows at 8 and far past
  // compute their angles from the frequencies (llama3 scaling here, so the
  // scaled frequencies are the ones used). Want: the rows rotated through
  // tables long enough to hold every position, bit for bit (both round the
  // same double cos and sin to f32).
  llmk::ModelConfig model;
  model.head_dim = 16;
  model.rope_theta = 500000.0f;
  model.rope_scaling.type = llmk::RopeScalingType::llama3;
  model.rope_scaling.factor = 8.0;
  model.rope_scaling.original_max_position_embeddings = 64;
  const int64_t num_tokens = 6, num_heads = 2, num_kv_heads = 1, head_dim = 16, half = 8, table_positions = 8;
  const std::vector<int32_t> positions{0, 7, 8, 9, 300, 20000};
  const int64_t all_positions = 20001;
  std::vector<float> short_cos(table_positions * half), short_sin(short_cos.size());
  std::vector<float> long_cos(all_positions * half), long_sin(long_cos.size());
  llmk::rope_tables(model, table_positions, short_cos.data(), short_sin.data());
  llmk::rope_tables(model, all_positions, long_cos.data(), long_sin.data());
  const std::vector<double> inv_freq = llmk::rope_inv_freq(model);
  const int64_t row = (num_heads + num_kv_heads) * head_dim;
  const auto qk = random_floats(static_cast<std::size_t>(num_tokens * row), 71, -2.0f, 2.0f);
  for (auto seed : seeds) {
    reset_simulator(seed);
    device_buffer<float> dwant(qk), dgot(qk), dlong_cos(long_cos), dlong_sin(long_sin), dcos(short_cos),
        dsin(short_sin);
    device_buffer<int32_t> dpositions(positions);
    device_buffer<double> dinv_freq(inv_freq);
    CUDA_REQUIRE(cuda::rope(dwant.get(), row, num_heads, dwant.get() + num_heads * head_dim, row, num_kv_heads,
                            num_tokens, head_dim, dpositions.get(), dlong_cos.get(), dlong_sin.get(), nullptr));
    CUDA_REQUIRE(cuda::rope(dgot.get(), row, num_heads, dgot.get() + num_heads * head_dim, row, num_kv_heads,
                            num_tokens, head_dim, dpositions.get(), dcos.get(), dsin.get(), table_positions,
                            dinv_freq.get(), nullptr));
    const auto want = dwant.download(), got = dgot.download();
    REQUIRE(got == want);
    REQUIRE(got != qk);  // it rotated
  }
}

TEST_CASE("silu_mul over a fused gate/up buffer matches float64 and the CPU engine's silu_mul") {
  for (const int64_t dim : {1, 5, 67, 1001}) {
    const int64_t num_rows = 3;
    const auto gate_up = random_floats(static_cast<std::size_t>(num_rows * 2 * dim), 51 + dim, -12.0f, 12.0f);
    std::vector<double> want(static_cast<std::size_t>(num_rows * dim));
    for (int64_t r = 0; r < num_rows; ++r)
      for (int64_t i = 0; i < dim; ++i) {
        const double g = gate_up[r * 2 * dim + i], u = gate_up[r * 2 * dim + dim + i];
        want[r * dim + i] = g / (1.0 + std::exp(-g)) * u;
      }
    // The CPU engine's kernel: the same halves in the same order.
    std::vector<float> cpu(want.size());
    llmk::kernels::cpu::silu_mul(gate_up.data(), cpu.data(), num_rows, dim);
    for (auto seed : seeds) {
      reset_simulator(seed);
      INFO("dim " << dim << " seed " << seed);
      device_buffer<float> dgate_up(gate_up), dout(want.size());
      CUDA_REQUIRE(cuda::silu_mul(dgate_up.get(), dout.get(), num_rows, dim, nullptr));
      const auto out = dout.download();
      for (std::size_t i = 0; i < out.size(); ++i) {
        INFO("element " << i << " got " << out[i] << " want " << want[i] << " cpu " << cpu[i]);
        REQUIRE(std::abs(out[i] - want[i]) <= kSiluMulTolerance * std::abs(want[i]) + 1e-30);
        REQUIRE(std::abs(out[i] - cpu[i]) <= 2.0 * kSiluMulTolerance * std::abs(want[i]) + 1e-30);
      }
    }
  }
}
