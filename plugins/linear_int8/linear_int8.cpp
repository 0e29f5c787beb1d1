// linear.int8: W8A8 on AVX-512 VNNI (kernels/cpu/linear_w8a8.hpp).
//
// At create, weights are quantized per output channel (symmetric, no
// calibration); each forward quantizes activations per row and multiplies in
// int32 with dequantization fused into the output. Layers named in the
// "float_layers" option stay f32 (default ["o_proj"]: the attention output
// projection is the most sensitive to activation outliers).
//
// Layers kept in float stay in the checkpoint's precision (f32, f16 or bf16).
//
// Many-row products (16 rows or more) go to oneDNN's blocked int8 matmul
// where it runs on AMX tiles (Sapphire Rapids class): it reads the same
// packed panels in place (plugins/cpu_common/onednn_panels.hpp) and returns
// the int32 sums, which this plugin dequantizes exactly as its own kernels
// do, so both give the same bits. Option "matmul": "auto" (that, else the
// plugin's own kernels), "own" (always the plugin's), "onednn" (oneDNN's
// wherever it has a blocked int8 kernel, AMX or AVX512-VNNI; refused where it
// has none), "onednn_reference" (oneDNN's reference code where it has no
// blocked kernel: slow, for tests of this path on any CPU). Needs
// in_features a multiple of 64, else the plugin's own kernels.
//
// Options: {"float_layers": ["o_proj"], "matmul": "auto"}
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "kernels/cpu/linear_w8a8.hpp"
#include "plugins/cpu_common/onednn_panels.hpp"
#include "plugins/quant_common/linear_common.hpp"

namespace llmk::quant {

class LinearInt8 {
 public:
  static constexpr const char* kName = "linear.int8";
  static constexpr const char* kVersion = "1.0.0";
  static constexpr const char* kDescription =
      "W8A8: int8 weights per output channel, int8 activations per token, int32 VNNI accumulation";
  static constexpr const char* kCapabilities =
      R"({"weight_dtypes":["f32","f16","bf16"],"scheme":"w8a8","options":{"float_layers":["o_proj"],"matmul":"auto"}})";

  static bool supports(const llmk_linear_desc& d, std::string& why) {
    if (!check_desc(d, why)) return false;
    try {
      const auto options = parse_options(d);
      check_option_keys(options, {"float_layers", "matmul"}, d);
      float_layers(options, {}, d);
      linear_options::choice_option(options, "matmul", "auto", {"auto", "own", "onednn", "onednn_reference"}, d);
    } catch (const std::exception& e) {
      why = e.what();
      return false;
    }
    return true;
  }

  explicit LinearInt8(const llmk_linear_desc& d)
      : in_(d.in_features), out_(d.out_features), threads_(thread_count(d)) {
    const auto options = parse_options(d);
    check_option_keys(options, {"float_layers", "matmul"}, d);
    const std::string matmul =
        linear_options::choice_option(options, "matmul", "auto", {"auto", "own", "onednn", "onednn_reference"}, d);
    if (layer_matches(layer_name(d), float_layers(options, {"o_proj"}, d))) {
      float_ = std::make_unique<FloatLayer>(d, threads_);
      return;
    }
    const std::vector<float> w = weight_as_f32(d);
    const size_t padded_out = static_cast<size_t>(kernels::cpu::num_panels16(out_) * kernels::cpu::kPanels16Width);
    packed_ = StreamArray<int8_t>(kernels::cpu::w8a8_size(out_, in_));
    scale_ = StreamArray<float>(padded_out);
    row_sum_ = StreamArray<int32_t>(padded_out);
    kernels::cpu::pack_w8a8(w.data(), out_, in_, packed_.data(), scale_.data(), row_sum_.data());
    const bool want_onednn = matmul == "onednn" || matmul == "onednn_reference" ||
                             (matmul == "auto" && cpu_common::OnednnPanelsMatmul::amx_available());
    if (want_onednn && d.max_rows >= kMatmulMinRows) {
      std::string why;
      matmul_ = cpu_common::OnednnPanelsMatmul::make(cpu_common::PanelsLayout::w8a8, packed_.data(), packed_.bytes(),
                                                     in_, out_, d.max_rows, threads_, why,
                                                     matmul == "onednn_reference");
      if (matmul_ && matmul == "auto" && !matmul_->on_amx()) matmul_.reset();
      if (!matmul_ && matmul != "auto")
        throw plugin::Error(LLMK_ERR_UNSUPPORTED, layer_name(d) + ": matmul " + matmul + ": " + why);
    }
  }

  // The rows' quantized activations; with oneDNN, also their scales and the
  // int32 sums, all padded to its row bucket.
  size_t workspace_bytes(uint32_t num_rows) const {
    if (float_) return 0;
    if (matmul_ && num_rows >= kMatmulMinRows) {
      const auto padded = static_cast<size_t>(cpu_common::OnednnPanelsMatmul::padded_rows(num_rows));
      return round64(padded * in_) + round64(padded * sizeof(float)) + padded * out_ * sizeof(int32_t);
    }
    return kernels::cpu::w8a8_scratch_size(std::max<uint32_t>(num_rows, 1), in_);
  }

  // CPU, F32 (supports() refuses anything else): x and y are floats; no queue.
  void forward(const void* x_in, void* y_out, uint32_t num_rows, void* workspace, void* /*stream*/) {
    const auto* x = static_cast<const float*>(x_in);
    auto* y = static_cast<float*>(y_out);
    if (num_rows == 0) return;
    if (float_) return float_->forward(x, y, num_rows);
    if (matmul_ && num_rows >= kMatmulMinRows) return forward_onednn(x, y, num_rows, static_cast<uint8_t*>(workspace));
    kernels::cpu::linear_w8a8(x, num_rows, in_, packed_.data(), scale_.data(), row_sum_.data(), out_, y,
                              static_cast<uint8_t*>(workspace), threads_);
  }

  size_t weight_bytes() const {
    return float_ ? float_->weight_bytes() : packed_.bytes() + scale_.bytes() + row_sum_.bytes();
  }

 private:
  static constexpr uint32_t kMatmulMinRows = 16;
  static size_t round64(size_t bytes) { return (bytes + 63) / 64 * 64; }

  // The rows quantized as linear_w8a8 quantizes them (the bucket's padding
  // rows are zeros, stored + 128), oneDNN's int32 sums, then the same
  // dequantization as the plugin's kernels: the same bits as they give.
  void forward_onednn(const float* x, float* y, uint32_t num_rows, uint8_t* workspace) {
    const int64_t padded = cpu_common::OnednnPanelsMatmul::padded_rows(num_rows);
    uint8_t* xq = workspace;
    auto* x_scale = reinterpret_cast<float*>(workspace + round64(static_cast<size_t>(padded * in_)));
    auto* sums = reinterpret_cast<int32_t*>(reinterpret_cast<uint8_t*>(x_scale) +
                                            round64(static_cast<size_t>(padded) * sizeof(float)));
    kernels::cpu::quantize_rows_u8(x, num_rows, in_, xq, x_scale);
    std::memset(xq + static_cast<size_t>(num_rows) * in_, 128, static_cast<size_t>((padded - num_rows) * in_));
    matmul_->multiply(xq, num_rows, sums);
    const float* w_scale = scale_.data();
    const int32_t* row_sum = row_sum_.data();
    const int64_t out = out_;
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (int64_t r = 0; r < static_cast<int64_t>(num_rows); ++r) {
      const float xs = x_scale[r];
      const int32_t* acc = sums + r * out;
      float* yr = y + r * out;
#pragma omp simd
      for (int64_t n = 0; n < out; ++n) yr[n] = static_cast<float>(acc[n] - (row_sum[n] << 7)) * (w_scale[n] * xs);
    }
  }

  int64_t in_, out_;
  int threads_;
  std::unique_ptr<FloatLayer> float_;
  StreamArray<int8_t> packed_;   // [num_panels16(out), k_pad / 4, 16, 4]
  StreamArray<float> scale_;     // [num_panels16(out) * 16]
  StreamArray<int32_t> row_sum_; // [num_panels16(out) * 16]
  std::unique_ptr<cpu_common::OnednnPanelsMatmul> matmul_;  // many-row products, when oneDNN takes them
};

}  // namespace llmk::quant

LLMK_EXPORT_LINEAR_PLUGIN(llmk::quant::LinearInt8)
