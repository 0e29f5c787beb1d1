// The lookup-table 4-bit linear (kernels/cpu/linear_lut4.hpp): quantizing
// to NF4 and IQ4_NL, the packed layout against GGUF's IQ4_NL decoder, and
// every path (this build's CPU level and the portable kernels, f32 and int8
// activations) against float64 references.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/gguf_blocks.hpp"
#include "core/gguf_types.hpp"
#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/linear_lut4.hpp"
#include "kernels/cpu/linear_lut4_panels.hpp"
#include "quant/quant_test_util.hpp"

namespace {

using namespace llmk::kernels::cpu;

// The codebooks as published: NF4 from the QLoRA paper's appendix
// (bitsandbytes' create_normal_map), IQ4_NL from ggml's kvalues_iq4nl.
constexpr double kNf4Published[16] = {-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                                      -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                                      0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
                                      0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                                      0.7229568362236023, 1.0};
constexpr double kIq4NlPublished[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

struct Packed {
  Lut4Shape shape;
  std::vector<uint8_t> bytes;
  std::vector<double> w;  // the dequantized weights, [out][in]
};

Packed quantized(const std::vector<float>& w, int64_t out, int64_t in, int64_t block, Lut4Book book, Lut4Scale mode) {
  Packed p;
  p.shape = Lut4Shape{in, out, block};
  REQUIRE(p.shape.valid());
  std::vector<uint8_t> q(static_cast<size_t>(out * in));
  std::vector<float> scale(static_cast<size_t>(out * p.shape.num_blocks()));
  quantize_lut4(w.data(), p.shape, book, mode, q.data(), scale.data(), 2);
  p.bytes.resize(lut4_size(p.shape));
  pack_lut4(q.data(), scale.data(), p.shape, p.bytes.data());
  const Lut4Codebook& c = lut4_codebook(book);
  p.w.resize(static_cast<size_t>(out * in));
  for (int64_t n = 0; n < out; ++n)
    for (int64_t k = 0; k < in; ++k)
      p.w[n * in + k] = double(lut4_scale_at(p.bytes.data(), p.shape, n, k)) *
                        c.values[lut4_index_at(p.bytes.data(), p.shape, n, k)];
  return p;
}

// Rounds x as the int8 path defines (per 32 inputs, d = amax / 127 kept as
// f16, q = round-to-nearest-even(x * 127 / amax)): the values it multiplies.
std::vector<double> rounded_int8(const std::vector<float>& x, int64_t rows, int64_t in) {
  std::vector<double> out(x.size());
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t c = 0; 32 * c < in; ++c) {  // a last, partial 32 as if padded with zeros
      const float* xc = x.data() + m * in + 32 * c;
      const int len = static_cast<int>(std::min<int64_t>(32, in - 32 * c));
      float amax = 0.0f;
      for (int i = 0; i < len; ++i) amax = std::max(amax, std::fabs(xc[i]));
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      const double d = f16_to_f32(f32_to_f16(amax / 127.0f));
      for (int i = 0; i < len; ++i) out[m * in + 32 * c + i] = d * std::nearbyint(xc[i] * id);
    }
  return out;
}

std::vector<float> run(const Packed& p, Lut4Book book, const std::vector<float>& x, int64_t rows, Lut4Activations a,
                       Lut4Kernels k) {
  auto scratch = llmk::test::aligned_buffer<uint8_t>(lut4_scratch_size(p.shape, rows, a, 2));
  std::vector<float> y(static_cast<size_t>(rows * p.shape.out_features), NAN);
  linear_lut4(x.data(), rows, p.shape, book, p.bytes.data(), y.data(), scratch.get(), 2, a, k);
  return y;
}

// The same weight repacked into 16-channel panels (the int8 path's layout).
std::vector<uint8_t> panels_of(const Packed& p) {
  std::vector<uint8_t> panels(lut4_panels_size(p.shape));
  pack_lut4_panels(p.bytes.data(), p.shape, panels.data(), 2);
  return panels;
}

std::vector<float> run_panels(const Packed& p, const std::vector<uint8_t>& panels, Lut4Book book,
                              const std::vector<float>& x, int64_t rows, Lut4Kernels k, int threads = 2) {
  auto scratch = llmk::test::aligned_buffer<uint8_t>(lut4_panels_scratch_size(p.shape, rows, threads));
  std::vector<float> y(static_cast<size_t>(rows * p.shape.out_features), NAN);
  linear_lut4_panels(x.data(), rows, p.shape, book, panels.data(), y.data(), scratch.get(), threads, k);
  return y;
}

const char* book_name(Lut4Book b) { return b == Lut4Book::nf4 ? "nf4" : "iq4_nl"; }

}  // namespace

TEST_CASE("The LUT4 codebooks are the published NF4 and IQ4_NL values, and the int8 levels within half a level",
          "[kernels][lut4]") {
  for (const Lut4Book book : {Lut4Book::nf4, Lut4Book::iq4_nl}) {
    const Lut4Codebook& c = lut4_codebook(book);
    const double* published = book == Lut4Book::nf4 ? kNf4Published : kIq4NlPublished;
    for (int i = 0; i < 16; ++i) {
      CHECK(c.values[i] == static_cast<float>(published[i]));
      CHECK(std::fabs(double(c.unit) * c.levels[i] - c.values[i]) <= 0.5 * c.unit + 1e-7);
    }
  }
  CHECK(lut4_codebook(Lut4Book::iq4_nl).unit == 1.0f);
}

TEST_CASE("LUT4 absmax quantization takes each weight to its nearest value after scaling, and the search never loses",
          "[kernels][lut4]") {
  const int64_t out = 9, in = 320;
  const std::vector<float> w = llmk::test::random_matrix(out, in, 7, /*zero_row=*/3);
  for (const Lut4Book book : {Lut4Book::nf4, Lut4Book::iq4_nl})
    for (const int64_t block : {32, 64, 128}) {
      INFO(book_name(book) << " block " << block);
      const Lut4Codebook& c = lut4_codebook(book);
      const Packed a = quantized(w, out, in, block, book, Lut4Scale::absmax);
      const Packed s = quantized(w, out, in, block, book, Lut4Scale::search);
      for (int64_t n = 0; n < out; ++n)
        for (int64_t b0 = 0; b0 < in; b0 += block) {
          double amax = 0, err_a = 0, err_s = 0;
          for (int64_t k = b0; k < std::min(in, b0 + block); ++k) amax = std::max(amax, std::fabs(double(w[n * in + k])));
          const double scale = lut4_scale_at(a.bytes.data(), a.shape, n, b0);
          const double expect = amax / c.max_abs;
          CHECK(std::fabs(scale - expect) <= (block == 32 ? 1e-3 : 1e-6) * expect);  // f16 at block 32
          for (int64_t k = b0; k < std::min(in, b0 + block); ++k) {
            const double t = scale != 0 ? w[n * in + k] / scale : 0;
            const int q = lut4_index_at(a.bytes.data(), a.shape, n, k);
            for (int i = 0; i < 16; ++i) REQUIRE(std::fabs(t - c.values[q]) <= std::fabs(t - c.values[i]) + 1e-6);
            err_a += std::pow(w[n * in + k] - a.w[n * in + k], 2);
            err_s += std::pow(w[n * in + k] - s.w[n * in + k], 2);
          }
          CHECK(err_s <= err_a * (1 + 1e-9) + 1e-30);
          if (n == 3) CHECK(err_a == 0.0);  // the all-zero row stays zero
        }
    }
}

TEST_CASE("LUT4 packs GGUF IQ4_NL blocks to exactly the values ggml's layout decodes to", "[kernels][lut4]") {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal;
  for (const int64_t in : {32, 96, 256}) {
    const int64_t out = 5, nb = in / 32;
    std::vector<uint8_t> blocks(static_cast<size_t>(out * nb * 18));
    for (int64_t b = 0; b < out * nb; ++b) {
      const uint16_t d = f32_to_f16(0.01f * normal(rng));
      std::memcpy(&blocks[b * 18], &d, 2);
      for (int j = 2; j < 18; ++j) blocks[b * 18 + j] = static_cast<uint8_t>(byte(rng));
    }
    const Lut4Shape s{in, out, 32};
    std::vector<uint8_t> packed(lut4_size(s));
    pack_lut4_iq4_nl(blocks.data(), s, packed.data(), 2);
    const auto decode = llmk::ggml_block_decoder(llmk::GgmlType::iq4_nl);
    REQUIRE(decode != nullptr);
    const Lut4Codebook& c = lut4_codebook(Lut4Book::iq4_nl);
    for (int64_t n = 0; n < out; ++n)
      for (int64_t b = 0; b < nb; ++b) {
        float ref[32];
        decode(&blocks[(n * nb + b) * 18], ref);
        for (int64_t i = 0; i < 32; ++i) {
          const int64_t k = 32 * b + i;
          REQUIRE(lut4_scale_at(packed.data(), s, n, k) * c.values[lut4_index_at(packed.data(), s, n, k)] == ref[i]);
        }
      }
  }
}

TEST_CASE("LUT4 with f32 activations matches float64 of the dequantized weights on every path", "[kernels][lut4]") {
  for (const Lut4Book book : {Lut4Book::nf4, Lut4Book::iq4_nl})
    for (const int64_t block : {32, 64, 256})
      for (const int64_t in : {96, 172, 512})
        for (const int64_t out : {1, 17, 40}) {
          const std::vector<float> w = llmk::test::random_matrix(out, in, static_cast<uint32_t>(in + out + block));
          const Packed p = quantized(w, out, in, block, book, Lut4Scale::search);
          for (const int64_t rows : {1, 3, 17}) {
            const std::vector<float> x = llmk::test::random_matrix(rows, in, static_cast<uint32_t>(rows * 31 + in), 1);
            for (const Lut4Kernels k : {Lut4Kernels::native, Lut4Kernels::portable}) {
              INFO(book_name(book) << " block " << block << " " << rows << "x" << in << " -> " << out
                                   << (k == Lut4Kernels::native ? " native" : " portable"));
              const std::vector<float> y = run(p, book, x, rows, Lut4Activations::f32, k);
              for (int64_t m = 0; m < rows; ++m)
                for (int64_t n = 0; n < out; ++n) {
                  double ref = 0, mag = 0;
                  for (int64_t kk = 0; kk < in; ++kk) {
                    ref += double(x[m * in + kk]) * p.w[n * in + kk];
                    mag += std::fabs(double(x[m * in + kk]) * p.w[n * in + kk]);
                  }
                  REQUIRE(std::fabs(y[m * out + n] - ref) <= 1e-5 * mag + 1e-30);
                }
            }
          }
        }
}

TEST_CASE("LUT4 with int8 activations sums exactly the levels and int8 rows its definition gives, on every path",
          "[kernels][lut4]") {
  for (const Lut4Book book : {Lut4Book::nf4, Lut4Book::iq4_nl})
    for (const int64_t block : {32, 64, 128})
      for (const int64_t in : {96, 172, 512})
        for (const int64_t out : {1, 17, 40}) {
          const Lut4Codebook& c = lut4_codebook(book);
          const std::vector<float> w = llmk::test::random_matrix(out, in, static_cast<uint32_t>(in * 3 + out + block));
          const Packed p = quantized(w, out, in, block, book, Lut4Scale::search);
          for (const int64_t rows : {1, 3, 17}) {
            // Every other row has one 32-input stretch 64 times louder: per-32 scales keep the rest fine.
            std::vector<float> x = llmk::test::random_matrix(rows, in, static_cast<uint32_t>(rows * 7 + in), 1);
            for (int64_t m = 0; m < rows; m += 2)
              for (int64_t kk = 32; kk < 64; ++kk) x[m * in + kk] *= 64;
            const std::vector<double> xq = rounded_int8(x, rows, in);
            const std::vector<uint8_t> panels = panels_of(p);
            for (const bool on_panels : {false, true})
            for (const Lut4Kernels k : {Lut4Kernels::native, Lut4Kernels::portable}) {
              INFO(book_name(book) << " block " << block << " " << rows << "x" << in << " -> " << out
                                   << (k == Lut4Kernels::native ? " native" : " portable")
                                   << (on_panels ? " panels" : " units"));
              const std::vector<float> y = on_panels ? run_panels(p, panels, book, x, rows, k)
                                                     : run(p, book, x, rows, Lut4Activations::int8, k);
              for (int64_t m = 0; m < rows; ++m)
                for (int64_t n = 0; n < out; ++n) {
                  // Its definition: levels on the unit grid times int8 rows, f32 accumulation only.
                  double def = 0, mag = 0, ref = 0, bound = 0;
                  for (int64_t kk = 0; kk < in; ++kk) {
                    const double s = lut4_scale_at(p.bytes.data(), p.shape, n, kk);
                    const int q = lut4_index_at(p.bytes.data(), p.shape, n, kk);
                    const double wl = s * c.unit * c.levels[q];
                    def += xq[m * in + kk] * wl;
                    mag += std::fabs(xq[m * in + kk] * wl);
                    // Against the exact weights: the rows' rounding (half a step, plus the f16 scale's
                    // relative 2^-11) and the levels' (half a unit).
                    ref += double(x[m * in + kk]) * p.w[n * in + kk];
                    double amax = 0;
                    for (int64_t j = kk / 32 * 32; j < std::min(in, kk / 32 * 32 + 32); ++j)
                      amax = std::max(amax, std::fabs(double(x[m * in + j])));
                    bound += std::fabs(p.w[n * in + kk]) * (amax / 254 * 1.001 + std::fabs(x[m * in + kk]) * 0x1p-11) +
                             std::fabs(xq[m * in + kk]) * std::fabs(s) * 0.5 * c.unit;
                  }
                  REQUIRE(std::fabs(y[m * out + n] - def) <= 1e-5 * mag + 1e-30);
                  REQUIRE(std::fabs(y[m * out + n] - ref) <= bound + 1e-5 * mag + 1e-30);
                }
            }
          }
        }
}

TEST_CASE("LUT4 panels hold every index and scale of the unit layout, as stored", "[kernels][lut4]") {
  for (const Lut4Book book : {Lut4Book::nf4, Lut4Book::iq4_nl})
    for (const int64_t block : {32, 64, 256})
      for (const int64_t in : {40, 172, 512})
        for (const int64_t out : {1, 17, 33}) {
          INFO(book_name(book) << " block " << block << " " << in << " -> " << out);
          const std::vector<float> w = llmk::test::random_matrix(out, in, static_cast<uint32_t>(in + 5 * out + block));
          const Packed p = quantized(w, out, in, block, book, Lut4Scale::search);
          const std::vector<uint8_t> panels = panels_of(p);
          for (int64_t n = 0; n < out; ++n)
            for (int64_t k = 0; k < in; ++k) {
              REQUIRE(lut4_panels_index_at(panels.data(), p.shape, n, k) == lut4_index_at(p.bytes.data(), p.shape, n, k));
              REQUIRE(lut4_panels_scale_at(panels.data(), p.shape, n, k) == lut4_scale_at(p.bytes.data(), p.shape, n, k));
            }
        }
}

TEST_CASE("LUT4 panels give a row the same bits alone, in a batch, and on any thread count", "[kernels][lut4]") {
  for (const Lut4Book book : {Lut4Book::nf4, Lut4Book::iq4_nl})
    for (const int64_t block : {32, 128}) {
      const int64_t out = 70, in = 200, rows = 11;
      INFO(book_name(book) << " block " << block);
      const std::vector<float> w = llmk::test::random_matrix(out, in, static_cast<uint32_t>(block + 3));
      const Packed p = quantized(w, out, in, block, book, Lut4Scale::absmax);
      const std::vector<uint8_t> panels = panels_of(p);
      const std::vector<float> x = llmk::test::random_matrix(rows, in, 29, 1);
      const std::vector<float> batch = run_panels(p, panels, book, x, rows, Lut4Kernels::native, 2);
      REQUIRE(run_panels(p, panels, book, x, rows, Lut4Kernels::native, 1) == batch);
      for (int64_t m = 0; m < rows; ++m) {
        const std::vector<float> xm(x.begin() + m * in, x.begin() + (m + 1) * in);
        const std::vector<float> alone = run_panels(p, panels, book, xm, 1, Lut4Kernels::native, 2);
        for (int64_t n = 0; n < out; ++n) REQUIRE(alone[n] == batch[m * out + n]);
      }
    }
}
