#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/gguf_blocks.hpp"
#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/linear_gguf.hpp"

namespace {

using llmk::kernels::cpu::GgufQuant;

struct TypeInfo {
  GgufQuant type;
  const char* name;
  int block, bytes;
  int code_begin, code_end;  // the bytes holding the values' codes (the rest: scales, mins)
  int d_at, dmin_at;         // f16 offsets (-1: none)
};

// The layouts of core/gguf_blocks.hpp.
const TypeInfo kTypes[] = {
    {GgufQuant::q4_0, "Q4_0", 32, 18, 2, 18, 0, -1},     {GgufQuant::q4_1, "Q4_1", 32, 20, 4, 20, 0, 2},
    {GgufQuant::q5_0, "Q5_0", 32, 22, 2, 22, 0, -1},     {GgufQuant::q5_1, "Q5_1", 32, 24, 4, 24, 0, 2},
    {GgufQuant::q8_0, "Q8_0", 32, 34, 2, 34, 0, -1},     {GgufQuant::q4_k, "Q4_K", 256, 144, 16, 144, 0, 2},
    {GgufQuant::q5_k, "Q5_K", 256, 176, 16, 176, 0, 2},  {GgufQuant::q6_k, "Q6_K", 256, 210, 0, 192, 208, -1},
};

struct AlignedBytes {
  explicit AlignedBytes(size_t n) : p(static_cast<uint8_t*>(std::aligned_alloc(64, (n + 64) / 64 * 64)), &std::free) {}
  uint8_t* data() { return p.get(); }
  std::unique_ptr<uint8_t, decltype(&std::free)> p;
};

void put_half(uint8_t* at, float v) {
  const uint16_t h = llmk::kernels::cpu::f32_to_f16(v);
  std::memcpy(at, &h, 2);
}
double get_half_of(float v) { return llmk::kernels::cpu::f16_to_f32(llmk::kernels::cpu::f32_to_f16(v)); }
float get_half(const uint8_t* at) {
  uint16_t h;
  std::memcpy(&h, at, 2);
  return llmk::kernels::cpu::f16_to_f32(h);
}

// Random blocks with sane f16 scales (and any 6-bit or int8 sub-block scales),
// and among them the edge cases: zero blocks, all-ones code bytes (every
// nibble and bit at its maximum), the largest and the smallest (subnormal)
// f16 scales.
std::vector<uint8_t> random_blocks(const TypeInfo& ti, int64_t num_blocks, std::mt19937& rng) {
  std::vector<uint8_t> w(num_blocks * ti.bytes);
  std::uniform_int_distribution<int> byte(0, 255), pick(0, 9);
  std::uniform_real_distribution<float> scale(0.002f, 0.05f);
  for (int64_t b = 0; b < num_blocks; ++b) {
    uint8_t* blk = w.data() + b * ti.bytes;
    for (int i = 0; i < ti.bytes; ++i) blk[i] = static_cast<uint8_t>(byte(rng));
    float d = scale(rng) * (ti.block == 32 && byte(rng) < 128 ? -1.0f : 1.0f), dmin = scale(rng) * 0.5f;
    const int mode = pick(rng);
    if (mode == 0) {
      std::memset(blk, 0, ti.bytes);
      continue;
    }
    if (mode == 1) std::memset(blk + ti.code_begin, 0xff, ti.code_end - ti.code_begin);
    if (mode == 1 && ti.block == 256 && ti.type != GgufQuant::q6_k) std::memset(blk + 4, 0xff, 12);  // scales 63
    if (mode == 2) d = dmin = 65504.0f;
    if (mode == 3) d = dmin = 5.960464477539063e-08f;  // 2^-24
    put_half(blk + ti.d_at, d);
    // Q4_1 / Q5_1: a negative min of up to 8 d (as a symmetric range gives).
    if (ti.dmin_at >= 0) put_half(blk + ti.dmin_at, ti.block == 32 ? -dmin * (mode == 2 || mode == 3 ? 1 : 8) : dmin);
  }
  return w;
}

// The weights as core's decoders give them; with codes zeroed, each value's
// offset or min part (its magnitude bounds the kernel's cancellation).
void decode(const TypeInfo& ti, const std::vector<uint8_t>& w, std::vector<double>& value, std::vector<double>& base) {
  const auto decoder = llmk::ggml_block_decoder(static_cast<llmk::GgmlType>(ti.type));
  REQUIRE(decoder != nullptr);
  const int64_t num_blocks = static_cast<int64_t>(w.size()) / ti.bytes;
  value.resize(num_blocks * ti.block);
  base.resize(num_blocks * ti.block);
  std::vector<float> out(ti.block);
  std::vector<uint8_t> zeroed(ti.bytes);
  for (int64_t b = 0; b < num_blocks; ++b) {
    decoder(w.data() + b * ti.bytes, out.data());
    std::copy(out.begin(), out.end(), value.begin() + b * ti.block);
    std::memcpy(zeroed.data(), w.data() + b * ti.bytes, ti.bytes);
    std::memset(zeroed.data() + ti.code_begin, 0, ti.code_end - ti.code_begin);
    decoder(zeroed.data(), out.data());
    std::copy(out.begin(), out.end(), base.begin() + b * ti.block);
  }
}

// The activations as the kernels round them (the rule of linear_gguf.hpp,
// written from llama.cpp's documented Q8_0 / Q8_1 / Q8_K), per block of the
// weight's size: a[k] = the rounded value, err[k] = a bound on |x - a|; and
// per block, `shift`: what the kernel adds for a min weight of 1 beyond
// sum a (Q8_1's f16 sum minus the sum of a).
struct Rounded {
  std::vector<double> a, err, shift;
};

Rounded round_activations(const TypeInfo& ti, const float* x, int64_t in) {
  Rounded r{std::vector<double>(in), std::vector<double>(in), std::vector<double>(in / ti.block)};
  for (int64_t b = 0; b < in / ti.block; ++b) {
    const float* xb = x + b * ti.block;
    if (ti.block == 256) {
      float amax = 0.0f, max = 0.0f;
      for (int i = 0; i < 256; ++i)
        if (std::fabs(xb[i]) > amax) amax = std::fabs(xb[i]), max = xb[i];
      const float iscale = amax == 0.0f ? 0.0f : -127.0f / max, d = amax == 0.0f ? 0.0f : 1.0f / iscale;
      for (int i = 0; i < 256; ++i) {
        const int q = amax == 0.0f ? 0 : std::min(127, static_cast<int>(std::nearbyint(iscale * xb[i])));
        r.a[b * 256 + i] = static_cast<double>(d) * q;
        r.err[b * 256 + i] = 0.5 * std::fabs(d) * (1 + 1e-5) + 1e-6 * std::fabs(xb[i]);
      }
      continue;
    }
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const double dr = get_half_of(d);
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const int q = static_cast<int>(std::nearbyint(xb[i] * id));
      sum += q;
      r.a[b * 32 + i] = dr * q;
      r.err[b * 32 + i] = 0.5 * d * (1 + 1e-5) + std::fabs(d - dr) * 127 + 1e-6 * std::fabs(xb[i]);
    }
    if (ti.type == GgufQuant::q4_1 || ti.type == GgufQuant::q5_1)
      r.shift[b] = get_half_of(d * static_cast<float>(sum)) - dr * sum;
  }
  return r;
}

}  // namespace

namespace {

// linear_gguf on random blocks of type ti against (1) the float64 product of
// core's decoded weights with the activations rounded by the documented rule
// (only the kernel's f32 sums differ: 1e-5 of the magnitudes), and (2) the
// float64 product with x itself, within the rounding's error bound.
void check_linear_gguf(const TypeInfo& ti, int64_t rows, int64_t in, int64_t out, int threads) {
  using namespace llmk::kernels::cpu;
  CAPTURE(ti.name, rows, in, out, threads);
  std::mt19937 rng(static_cast<uint32_t>(rows * 7919 + in * 31 + out * 7 + threads + static_cast<int>(ti.type)));
  const std::vector<uint8_t> w = random_blocks(ti, out * in / ti.block, rng);
  std::vector<double> value, base;
  decode(ti, w, value, base);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int64_t> col(0, in - 1);
  std::vector<float> x(rows * in);
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t k = 0; k < in; ++k) x[m * in + k] = m == 1 ? 0.0f : normal(rng);  // row 1: all zero
    x[m * in + col(rng)] *= 40.0f;                                                // an outlier
  }
  AlignedBytes packed(gguf_packed_size(ti.type, out, in)), scratch(gguf_scratch_size(ti.type, rows, in));
  gguf_pack(ti.type, w.data(), out, in, packed.data(), threads);
  std::vector<float> y(rows * out, NAN);
  linear_gguf(ti.type, x.data(), rows, in, packed.data(), out, y.data(), scratch.data(), threads);
  const bool has_min = ti.type == GgufQuant::q4_1 || ti.type == GgufQuant::q5_1;
  const int64_t nb = in / ti.block;
  for (int64_t m = 0; m < rows; ++m) {
    const Rounded r = round_activations(ti, x.data() + m * in, in);
    for (int64_t n = 0; n < out; ++n) {
      double ref = 0, mag = 0, exact = 0, bound = 0;
      for (int64_t k = 0; k < in; ++k) {
        const double wv = value[n * in + k];
        ref += wv * r.a[k];
        mag += (std::fabs(wv) + std::fabs(base[n * in + k])) * std::fabs(r.a[k]);
        exact += wv * x[m * in + k];
        bound += std::fabs(wv) * r.err[k];
      }
      for (int64_t b = 0; b < nb && has_min; ++b) {
        const double min = get_half(w.data() + (n * nb + b) * ti.bytes + ti.dmin_at);
        ref += min * r.shift[b];
        bound += std::fabs(min * r.shift[b]);
      }
      const double got = y[m * out + n];
      CAPTURE(m, n, got, ref, exact, mag, bound);
      CHECK(std::fabs(got - ref) <= 1e-5 * mag);
      CHECK(std::fabs(got - exact) <= bound + 1e-5 * mag);
    }
  }
}

const TypeInfo& info(GgufQuant t) {
  for (const auto& ti : kTypes)
    if (ti.type == t) return ti;
  FAIL("no such type");
  return kTypes[0];
}

}  // namespace

TEST_CASE("gguf_quant_supported names the types with a kernel, with their block sizes", "[linear_gguf]") {
  using namespace llmk::kernels::cpu;
  for (const auto& ti : kTypes) {
    CAPTURE(ti.name);
    CHECK(gguf_quant_supported(static_cast<uint32_t>(ti.type)));
    CHECK(gguf_block_elems(ti.type) == ti.block);
    CHECK(gguf_block_bytes(ti.type) == static_cast<size_t>(ti.bytes));
  }
  for (const uint32_t other : {0u, 1u, 9u, 10u, 11u, 15u, 16u, 20u, 23u, 30u, 39u, 1000u}) {
    CAPTURE(other);
    CHECK_FALSE(gguf_quant_supported(other));
  }
}

TEST_CASE("linear_gguf equals the float64 product of decoded blocks and rounded activations, for every type",
          "[linear_gguf]") {
  // 1..128 rows (tiles of up to 8 rows, as even as they go); 1, 37 and 130
  // outputs (work items of 16 weight rows: partial items, and a split across
  // two threads); an odd number of 32-value blocks (96 inputs: a pair and a
  // half) and several K blocks.
  const int64_t rows = GENERATE(1, 2, 3, 7, 17, 128);
  const int threads = GENERATE(1, 2);
  for (const auto& ti : kTypes)
    for (const int64_t in : {ti.block == 256 ? int64_t{512} : int64_t{96}, int64_t{768}})
      for (const int64_t out : {int64_t{1}, int64_t{37}, int64_t{130}})
        if (out > 1 || rows <= 7) check_linear_gguf(ti, rows, in, out, threads);
}

TEST_CASE("linear_gguf takes many rows in several blocks of activation records", "[linear_gguf]") {
  // 300 rows: records of 8.25 KiB (Q6_K, 5632 inputs) and 8 KiB (Q8_0, 2048
  // inputs) per row, more than two blocks' worth (kActBlockBytes).
  check_linear_gguf(info(GgufQuant::q6_k), 300, 5632, 37, 2);
  check_linear_gguf(info(GgufQuant::q8_0), 300, 2048, 37, 2);
}

TEST_CASE("linear_gguf takes long rows in slices of the k dimension", "[linear_gguf]") {
  // On AVX-512 VNNI a tile of 8 rows meets the weight rows slice by slice
  // (kSliceTileBytes: 16 pairs of 32-value blocks, 10 K blocks): 5632 inputs
  // (TinyLlama's down projection) end in a part slice for every type, and
  // 1056 inputs (33 blocks) in a slice of one half pair. One row takes 5632
  // in one slice.
  const int64_t rows = GENERATE(1, 128);
  for (const GgufQuant t : {GgufQuant::q8_0, GgufQuant::q4_0, GgufQuant::q5_1, GgufQuant::q4_k, GgufQuant::q6_k})
    check_linear_gguf(info(t), rows, 5632, 37, 2);
  check_linear_gguf(info(GgufQuant::q8_0), rows, 1056, 19, 2);
}

TEST_CASE("linear_gguf gives a row the same bits alone and among other rows", "[linear_gguf]") {
  using namespace llmk::kernels::cpu;
  const auto t = GENERATE(GgufQuant::q8_0, GgufQuant::q4_0, GgufQuant::q5_1, GgufQuant::q4_k, GgufQuant::q5_k,
                          GgufQuant::q6_k);
  const int64_t in = GENERATE(768, 5632);  // one slice of the k dimension, several
  const TypeInfo& ti = info(t);
  const int64_t rows = 13, out = 70;
  std::mt19937 rng(static_cast<uint32_t>(ti.type));
  const std::vector<uint8_t> w = random_blocks(ti, out * in / ti.block, rng);
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * in), y_all(rows * out), y_one(out);
  for (auto& v : x) v = normal(rng);
  AlignedBytes packed(gguf_packed_size(t, out, in)), scratch(gguf_scratch_size(t, rows, in));
  gguf_pack(t, w.data(), out, in, packed.data(), 2);
  linear_gguf(t, x.data(), rows, in, packed.data(), out, y_all.data(), scratch.data(), 2);
  for (int64_t m = 0; m < rows; ++m) {
    linear_gguf(t, x.data() + m * in, 1, in, packed.data(), out, y_one.data(), scratch.data(), 1);
    CAPTURE(ti.name, in, m);
    CHECK(std::memcmp(y_one.data(), y_all.data() + m * out, out * sizeof(float)) == 0);
  }
}
