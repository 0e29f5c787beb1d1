// Lookup-table 4-bit linear: y = x W^T where every weight is a block scale
// times one of 16 codebook values, w[n, k] = s[n, block(k)] * values[q[n, k]].
// Two codebooks, one kernel family:
//   nf4     NormalFloat4 (QLoRA, Dettmers et al. 2023; bitsandbytes'
//           quant_map): the 16 quantiles of a standard normal rescaled to
//           [-1, 1] with an exact zero, scale = the block's absmax;
//   iq4_nl  ggml's IQ4_NL levels -127 ... 113 (integers), scale = f16 d.
//
// Layout (lut4): out_features rows, each in_features / 64 (rounded up) units
// of 36 bytes, a unit covering inputs [64u, 64u + 64):
//   bytes 0-3   block_size 32: two f16 scales, inputs 64u.. and 64u+32..;
//               block_size 64 or more: the f32 scale of the block holding them
//   bytes 4-35  byte i: low nibble q[64u + i], high nibble q[64u + 32 + i]
// (an in_features that ends inside a unit leaves the indices past it zero,
// and the scale of a missing 32 zero; the kernels pad x with zeros to a
// multiple of 32 inputs). 4.5 bits per weight; a GGUF IQ4_NL row of two blocks is one
// unit with its bytes regrouped.
//
// Activations (Lut4Activations):
//   int8  each row rounded to int8 per 32 inputs (d = amax / 127, round to
//         nearest even, d kept as f16: llama.cpp's Q8_0, kernels/cpu/
//         linear_gguf.hpp), the weights' indices looked up in the
//         codebook's int8 levels (vpshufb), exact integer dot products per 32
//         inputs, then scaled. The levels are the values on a grid:
//         values[i] ~= unit * levels[i] (iq4_nl: exact, unit 1; nf4: unit
//         1/127, each level within 1/254 of its value).
//   f32   the exact values: one row looks indices up in the f32 table
//         (vpermps on AVX-512, two vpermps and a blend on AVX2) and
//         multiplies them with f32 activations; more rows dequantize a tile
//         of 16-channel panels to f32 once and multiply every row with it
//         (linear_panels16.hpp's dequantized-panel GEMM, as linear_w4's f32
//         rows do).
// Each path exists per CPU level (AVX-512 VNNI, AVX2, through linear_gguf's
// row-tile pass) and as portable C++ (Lut4Kernels::portable, built at every
// level: the fallback off x86 and the tests' third path). AVX-512's table
// lookup is vpshufb per 128-bit lane: a 16-entry table is what it holds, so
// VBMI's 64-entry vpermb has nothing to add.
//
// linear.lut4's int8 rows run on the weight repacked into 16-channel panels
// (linear_lut4_panels.hpp, the same integer sums); this layout serves its f32
// rows, the CUDA twin, and is what the panels are made from.
//
// One of the linear family; its naming: kernels/cpu/linear.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace llmk::kernels::cpu {

enum class Lut4Book { nf4, iq4_nl };

struct Lut4Codebook {
  float values[16];   // ascending; w = scale * values[q]
  int8_t levels[16];  // the int8 path's: values[i] ~= unit * levels[i]
  float unit;
  float max_abs;      // max |values|: what "absmax" maps a block's largest weight to
};

const Lut4Codebook& lut4_codebook(Lut4Book book) noexcept;

constexpr int64_t kLut4MaxBlock = 4096;  // bitsandbytes' largest

struct Lut4Shape {
  int64_t in_features = 0;
  int64_t out_features = 0;
  int64_t block_size = 0;  // 32, or a multiple of 64 up to kLut4MaxBlock
  int64_t k32() const { return (in_features + 31) / 32 * 32; }  // inputs the kernels see (zero past in_features)
  int64_t num_units() const { return (in_features + 63) / 64; }
  int64_t num_blocks() const { return (in_features + block_size - 1) / block_size; }
  bool f16_scales() const { return block_size == 32; }
  // block_size 32 or a multiple of 64.
  bool valid() const {
    return in_features > 0 && out_features > 0 &&
           (block_size == 32 || (block_size > 0 && block_size % 64 == 0 && block_size <= kLut4MaxBlock));
  }
};

constexpr int64_t kLut4UnitBytes = 36;

// Bytes of the packed weight.
inline size_t lut4_size(const Lut4Shape& s) {
  return static_cast<size_t>(s.out_features * s.num_units() * kLut4UnitBytes);
}

// How quantizing at load picks a block's scale:
//   absmax  s = max |w| / max |values| and each weight to its nearest value
//           (bitsandbytes' NF4);
//   search  absmax's scale times f for f in 0.90, 0.92, ..., 1.10 and the
//           sign that puts the block's largest-magnitude weight on the
//           codebook's longer end, each assignment to nearest values
//           refitted to its least-squares scale; the candidate of least
//           squared error wins (absmax's own among them), as ggml's IQ4_NL
//           quantizer searches.
enum class Lut4Scale { absmax, search };

// w: [out_features, in_features] -> q: [out_features, in_features] indices,
// scale: [out_features, num_blocks] (f16-rounded where the layout keeps f16).
void quantize_lut4(const float* w, const Lut4Shape& shape, Lut4Book book, Lut4Scale mode, uint8_t* q, float* scale,
                   int num_threads);

// Packs indices and scales (as above) into the layout. A block_size-32
// scale is stored as f16 (exact for values it holds).
void pack_lut4(const uint8_t* q, const float* scale, const Lut4Shape& shape, uint8_t* packed);

// GGUF IQ4_NL blocks ([out_features][in_features / 32] blocks of 18 bytes: f16
// d, 16 bytes with value j in the low nibble of byte j and value j + 16 in
// its high nibble) into the layout (block_size 32).
void pack_lut4_iq4_nl(const void* blocks, const Lut4Shape& shape, uint8_t* packed, int num_threads);

// Accessors into the packed weight (tests and tools).
uint8_t lut4_index_at(const uint8_t* packed, const Lut4Shape& s, int64_t n, int64_t k);
float lut4_scale_at(const uint8_t* packed, const Lut4Shape& s, int64_t n, int64_t k);

enum class Lut4Activations { int8, f32 };
enum class Lut4Kernels { native, portable };

// Bytes of scratch linear_lut4 needs for up to max_rows rows on num_threads.
size_t lut4_scratch_size(const Lut4Shape& s, int64_t max_rows, Lut4Activations activations, int num_threads = 1);

// y: [num_rows, out_features] = x: [num_rows, in_features] times the packed
// weight. scratch: lut4_scratch_size bytes, 64-byte aligned.
void linear_lut4(const float* x, int64_t num_rows, const Lut4Shape& s, Lut4Book book, const uint8_t* packed, float* y,
                 void* scratch, int num_threads, Lut4Activations activations = Lut4Activations::int8,
                 Lut4Kernels kernels = Lut4Kernels::native);

}  // namespace llmk::kernels::cpu
