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
// Options: {"float_layers": ["o_proj"]}
#include <algorithm>
#include <memory>
#include <string>

#include "kernels/cpu/linear_w8a8.hpp"
#include "plugins/quant_common/linear_common.hpp"

namespace llmk::quant {

class LinearInt8 {
 public:
  static constexpr const char* kName = "linear.int8";
  static constexpr const char* kVersion = "1.0.0";
  static constexpr const char* kDescription =
      "W8A8: int8 weights per output channel, int8 activations per token, int32 VNNI accumulation";
  static constexpr const char* kCapabilities =
      R"({"weight_dtypes":["f32","f16","bf16"],"scheme":"w8a8","options":{"float_layers":["o_proj"]}})";

  static bool supports(const llmk_linear_desc& d, std::string& why) {
    if (!check_desc(d, why)) return false;
    try {
      const auto options = parse_options(d);
      check_option_keys(options, {"float_layers"}, d);
      float_layers(options, {}, d);
    } catch (const std::exception& e) {
      why = e.what();
      return false;
    }
    return true;
  }

  explicit LinearInt8(const llmk_linear_desc& d)
      : in_(d.in_features), out_(d.out_features), threads_(thread_count(d)) {
    const auto options = parse_options(d);
    check_option_keys(options, {"float_layers"}, d);
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
  }

  // The rows' quantized activations.
  size_t workspace_bytes(uint32_t num_rows) const {
    return float_ ? 0 : kernels::cpu::w8a8_scratch_size(std::max<uint32_t>(num_rows, 1), in_);
  }

  // CPU, F32 (supports() refuses anything else): x and y are floats; no queue.
  void forward(const void* x_in, void* y_out, uint32_t num_rows, void* workspace, void* /*stream*/) {
    const auto* x = static_cast<const float*>(x_in);
    auto* y = static_cast<float*>(y_out);
    if (num_rows == 0) return;
    if (float_) return float_->forward(x, y, num_rows);
    kernels::cpu::linear_w8a8(x, num_rows, in_, packed_.data(), scale_.data(), row_sum_.data(), out_, y,
                              static_cast<uint8_t*>(workspace), threads_);
  }

  size_t weight_bytes() const {
    return float_ ? float_->weight_bytes() : packed_.bytes() + scale_.bytes() + row_sum_.bytes();
  }

 private:
  int64_t in_, out_;
  int threads_;
  std::unique_ptr<FloatLayer> float_;
  StreamArray<int8_t> packed_;   // [num_panels16(out), k_pad / 4, 16, 4]
  StreamArray<float> scale_;     // [num_panels16(out) * 16]
  StreamArray<int32_t> row_sum_; // [num_panels16(out) * 16]
};

}  // namespace llmk::quant

LLMK_EXPORT_LINEAR_PLUGIN(llmk::quant::LinearInt8)
