// linear.uint8_zp: weight-only uint8 with a zero point (min/max mapped to
// 0..255), per tensor or per output channel, dequantized inside the GEMV
// (kernels/cpu/linear_wu8.hpp). A reference point for the int8/int4 schemes.
//
// Options: {"per_channel": true, "float_layers": []}
//
// Linear API 3.2: an 8-bit weight already quantized with one group per
// output channel (a GPTQ checkpoint with group_size -1,
// llmk_linear_int_groups) is taken as it is (options do not apply); its
// input order, if any, is a gather of x into the workspace. Smaller groups
// are refused (the kernel keeps one scale per channel).
#include <cstring>
#include <memory>
#include <string>

#include "kernels/cpu/linear_wu8.hpp"
#include "plugins/quant_common/int_groups.hpp"
#include "plugins/quant_common/linear_common.hpp"

namespace llmk::quant {

class LinearUint8Zp {
 public:
  static constexpr const char* kName = "linear.uint8_zp";
  static constexpr const char* kVersion = "1.0.0";
  static constexpr const char* kDescription =
      "Weight-only uint8 with zero point, per tensor or per channel, f32 activations";
  static constexpr const char* kCapabilities =
      R"({"weight_dtypes":["f32","f16","bf16","int8_groups"],"scheme":"w8a32-zp","options":{"per_channel":true,"float_layers":[]}})";

  static bool supports(const llmk_linear_desc& d, std::string& why) {
    if (is_int_groups(d)) return plugin::cpu_f32_linear(d, why) && per_channel_groups(d, why) != nullptr;
    if (!check_desc(d, why)) return false;
    try {
      per_channel_of(d, parse_options(d));
    } catch (const std::exception& e) {
      why = e.what();
      return false;
    }
    return true;
  }

  explicit LinearUint8Zp(const llmk_linear_desc& d)
      : in_(d.in_features), out_(d.out_features), threads_(thread_count(d)) {
    if (is_int_groups(d)) {
      take_int_groups(d);
      return;
    }
    const auto options = parse_options(d);
    per_channel_ = per_channel_of(d, options);
    if (layer_matches(layer_name(d), float_layers(options, {}, d))) {
      float_ = std::make_unique<FloatLayer>(d, threads_);
      return;
    }
    const std::vector<float> w = weight_as_f32(d);
    const size_t padded_out = static_cast<size_t>(kernels::cpu::num_panels16(out_) * kernels::cpu::kPanels16Width);
    packed_ = StreamArray<uint8_t>(kernels::cpu::wu8_size(out_, in_));
    scale_ = StreamArray<float>(padded_out);
    zero_ = StreamArray<uint8_t>(padded_out);
    kernels::cpu::pack_wu8(w.data(), out_, in_, per_channel_, packed_.data(), scale_.data(), zero_.data());
  }

  // Per-thread dequantized panels.
  size_t workspace_bytes(uint32_t num_rows) const {
    return float_ ? 0 : gather_.bytes(num_rows) + kernels::cpu::wu8_scratch_size(in_, threads_) * sizeof(float);
  }

  // CPU, F32 (supports() refuses anything else): x and y are floats; no queue.
  void forward(const void* x_in, void* y_out, uint32_t num_rows, void* workspace, void* /*stream*/) {
    const auto* x = static_cast<const float*>(x_in);
    auto* y = static_cast<float*>(y_out);
    if (num_rows == 0) return;
    if (float_) return float_->forward(x, y, num_rows);
    const float* xs = gather_.apply(x, num_rows, workspace);
    auto* scratch = reinterpret_cast<float*>(static_cast<char*>(workspace) + gather_.bytes(num_rows));
    kernels::cpu::linear_wu8(xs, num_rows, in_, packed_.data(), scale_.data(), zero_.data(), out_, y, scratch,
                             threads_);
  }

  // Per tensor, one scale and zero point are counted (the kernel keeps them
  // repeated per channel only for vector loads).
  size_t weight_bytes() const {
    if (float_) return float_->weight_bytes();
    return packed_.bytes() + (per_channel_ ? scale_.bytes() + zero_.bytes() : sizeof(float) + 1);
  }

 private:
  static const llmk_linear_int_groups* per_channel_groups(const llmk_linear_desc& d, std::string& why) {
    const llmk_linear_int_groups* w = int_groups_of(d, 8, why);
    if (w != nullptr && w->group_size != d.in_features) {
      why = layer_name(d) + ": groups of " + std::to_string(w->group_size) + " inputs; this plugin keeps one scale "
            "per output channel (group_size -1)";
      return nullptr;
    }
    return w;
  }

  void take_int_groups(const llmk_linear_desc& d) {
    std::string why;
    const llmk_linear_int_groups* w = per_channel_groups(d, why);
    if (w == nullptr) throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT, why);
    gather_ = InputGather(*w);
    const size_t padded_out = static_cast<size_t>(kernels::cpu::num_panels16(out_) * kernels::cpu::kPanels16Width);
    packed_ = StreamArray<uint8_t>(kernels::cpu::wu8_size(out_, in_));
    scale_ = StreamArray<float>(padded_out);
    zero_ = StreamArray<uint8_t>(padded_out);
    std::memset(packed_.data(), 0, packed_.bytes());
    std::memset(scale_.data(), 0, scale_.bytes());
    std::memset(zero_.data(), 0, zero_.bytes());
    const int64_t width = kernels::cpu::kPanels16Width;
    for (int64_t n = 0; n < out_; ++n) {
      for (int64_t k = 0; k < in_; ++k)
        packed_.data()[((n / width) * in_ + k) * width + n % width] = static_cast<uint8_t>(int_groups_q(*w, n, k));
      scale_.data()[n] = w->scales[n];
      zero_.data()[n] = w->zeros[n];
    }
  }

  static bool per_channel_of(const llmk_linear_desc& d, const nlohmann::json& options) {
    check_option_keys(options, {"per_channel", "float_layers"}, d);
    float_layers(options, {}, d);
    if (!options.contains("per_channel")) return true;
    if (!options["per_channel"].is_boolean())
      throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT, layer_name(d) + ": option per_channel must be true or false");
    return options["per_channel"].get<bool>();
  }

  int64_t in_, out_;
  int threads_;
  bool per_channel_ = true;
  std::unique_ptr<FloatLayer> float_;
  InputGather gather_;  // act-order weights: x gathered by the input order first
  StreamArray<uint8_t> packed_;  // [num_panels16(out), in_features, 16]
  StreamArray<float> scale_;     // [num_panels16(out) * 16]
  StreamArray<uint8_t> zero_;    // [num_panels16(out) * 16]
};

}  // namespace llmk::quant

LLMK_EXPORT_LINEAR_PLUGIN(llmk::quant::LinearUint8Zp)
