// linear.int4: int4 weights, group-wise along in_features, asymmetric with
// integer zero points, two weights per byte (kernels/cpu/linear_w4.hpp),
// unpacked inside the GEMV/GEMM.
//
// Options: {"group_size": 128, "range": "mse", "activations": "int8",
// "float_layers": [], "matmul": "auto"}. The
// group size is capped at in_features; otherwise it must be a multiple of 8.
// "range" picks each group's range: "mse" (the min/max range shrunk to
// minimize the group's squared error, kernels/cpu/linear_w4.hpp) or "min_max".
// "activations" sets how rows multiply: "int8" (the default) rounds each row
// to int8 per weight group and sums the products exactly on the integer
// multiply-add units, as int4 formats with 8-bit activations do (W4A8), the
// same way for decode, prefill and batched rows; "f32" keeps rows exact
// (nibbles converted to f32 for one row, dequantized f32 panels for more).
// On stories260K both give about the same top-1 agreement with float
// (tests/quant/test_quant_accuracy.cpp); int8 decodes llama-110m about 1.45x
// faster on an AVX2 CPU (docs/PERFORMANCE.md).
// Layers named in "float_layers" stay in the checkpoint's float precision.
// ["lm_head"] is the usual choice when accuracy matters more than memory: the
// output projection's error lands on the logits directly, but on small models
// with large vocabularies it is a large share of the weights (a quarter of
// llama-110m's), so by default every layer is int4.
// "matmul" picks what multiplies more than one row with int8 activations
// (prefill, batched steps): "auto" (AMX-INT8 tiles where the CPU has them
// and the layer's shape fits, else the vector kernels), "own" (the vector
// kernels: AVX-512 VNNI or AVX2), "amx" (the tiles; refused where the CPU
// has none), "amx_model" (the tile kernel on a software model of the tile
// unit: slow, for tests of this path on any CPU with an AVX-512 build). The
// tiles need in_features and group_size multiples of 64 (group_size at most
// 512); asked for by name on another shape, they are refused with the
// reason. All four give the same bits (kernels/cpu/linear_w4.hpp).
//
// Linear API 3.2: a weight already quantized to 4-bit groups (a GPTQ or AWQ
// checkpoint's, llmk_linear_int_groups) is taken as it is: its integers,
// scales and zero points are copied into the kernel's layout, nothing is
// re-rounded (group_size, range and float_layers do not apply to it). An
// act-order weight's input order is a gather of x into the workspace before
// the kernel runs.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/linear_w4.hpp"
#include "plugins/quant_common/int_groups.hpp"
#include "plugins/quant_common/linear_common.hpp"

namespace llmk::quant {

class LinearInt4 {
 public:
  static constexpr const char* kName = "linear.int4";
  static constexpr const char* kVersion = "1.1.0";
  static constexpr const char* kDescription =
      "Int4 weights: groups along in_features with scales and zero points; activations int8 per group (or f32)";
  static constexpr const char* kCapabilities =
      R"({"weight_dtypes":["f32","f16","bf16","int4_groups"],"scheme":"w4a8","options":{"group_size":128,"range":"mse","activations":"int8","float_layers":[],"matmul":"auto"}})";

  static bool supports(const llmk_linear_desc& d, std::string& why) {
    if (is_int_groups(d)) return supports_int_groups(d, why);
    if (!check_desc(d, why)) return false;
    try {
      const auto options = parse_options(d);
      const auto shape = shape_of(d, options);
      // A layer kept in float multiplies no int8 rows: its matmul choice is moot.
      if (!layer_matches(layer_name(d), float_layers(options, {}, d))) matmul_of(d, options, shape);
    } catch (const std::exception& e) {
      why = e.what();
      return false;
    }
    return true;
  }

  explicit LinearInt4(const llmk_linear_desc& d) : threads_(thread_count(d)) {
    const auto options = parse_options(d);
    if (is_int_groups(d)) {
      take_int_groups(d, options);
      return;
    }
    shape_ = shape_of(d, options);
    activations_ = activations_of(d, options);
    if (layer_matches(layer_name(d), float_layers(options, {}, d))) {
      float_ = std::make_unique<FloatLayer>(d, threads_);
      return;
    }
    matmul_ = matmul_of(d, options, shape_);
    const std::vector<float> w = weight_as_f32(d);
    packed_ = StreamArray<uint32_t>(kernels::cpu::w4_size(shape_));
    scale_ = StreamArray<float>(shape_.group_params());
    zero_ = StreamArray<uint8_t>(shape_.group_params());
    kernels::cpu::pack_w4(w.data(), shape_, packed_.data(), scale_.data(), zero_.data(), range_of(d, options));
  }

  // Every row's int8 activations, or (f32 rows) a padded row or per-thread dequantized panels.
  size_t workspace_bytes(uint32_t num_rows) const {
    return float_ ? 0
                  : gather_.bytes(num_rows) +
                        kernels::cpu::w4_scratch_size(shape_, threads_, num_rows, activations_) * sizeof(float);
  }

  // CPU, F32 (supports() refuses anything else): x and y are floats; no queue.
  void forward(const void* x_in, void* y_out, uint32_t num_rows, void* workspace, void* /*stream*/) {
    const auto* x = static_cast<const float*>(x_in);
    auto* y = static_cast<float*>(y_out);
    if (num_rows == 0) return;
    if (float_) return float_->forward(x, y, num_rows);
    const float* xs = gather_.apply(x, num_rows, workspace);
    auto* scratch = reinterpret_cast<float*>(static_cast<char*>(workspace) + gather_.bytes(num_rows));
    kernels::cpu::linear_w4(xs, num_rows, shape_, packed_.data(), scale_.data(), zero_.data(), y, scratch, threads_,
                            activations_, matmul_);
  }

  size_t weight_bytes() const {
    return float_ ? float_->weight_bytes() : packed_.bytes() + scale_.bytes() + zero_.bytes();
  }

 private:
  static bool supports_int_groups(const llmk_linear_desc& d, std::string& why) {
    if (!plugin::cpu_f32_linear(d, why)) return false;
    const llmk_linear_int_groups* w = int_groups_of(d, 4, why);
    if (w == nullptr) return false;
    try {
      const auto options = parse_options(d);
      check_option_keys(options, {"group_size", "range", "activations", "float_layers", "matmul"}, d);
      activations_of(d, options);
      const kernels::cpu::W4Shape s{d.in_features, d.out_features, w->group_size};
      if (!s.valid()) {
        why = layer_name(d) + ": group_size " + std::to_string(w->group_size) +
              " is not a multiple of 8 (the kernel's groups start on an octet)";
        return false;
      }
      matmul_of(d, options, s);
    } catch (const std::exception& e) {
      why = e.what();
      return false;
    }
    return true;
  }

  // The checkpoint's integers in the kernel's layout (linear_w4.hpp); padding channels stay zero.
  void take_int_groups(const llmk_linear_desc& d, const nlohmann::json& options) {
    std::string why;
    const llmk_linear_int_groups* w = int_groups_of(d, 4, why);
    if (w == nullptr) throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT, why);
    shape_ = kernels::cpu::W4Shape{d.in_features, d.out_features, w->group_size};
    if (!shape_.valid())
      throw plugin::Error(LLMK_ERR_UNSUPPORTED, layer_name(d) + ": group_size " + std::to_string(w->group_size) +
                                                    " is not a multiple of 8");
    activations_ = activations_of(d, options);
    matmul_ = matmul_of(d, options, shape_);
    gather_ = InputGather(*w);
    packed_ = StreamArray<uint32_t>(kernels::cpu::w4_size(shape_));
    scale_ = StreamArray<float>(shape_.group_params());
    zero_ = StreamArray<uint8_t>(shape_.group_params());
    std::memset(packed_.data(), 0, packed_.bytes());
    std::memset(scale_.data(), 0, scale_.bytes());
    std::memset(zero_.data(), 0, zero_.bytes());
    const int64_t width = kernels::cpu::kPanels16Width, octets = shape_.k_pad() / 8, groups = shape_.num_groups();
    for (int64_t n = 0; n < shape_.out_features; ++n) {
      for (int64_t k = 0; k < shape_.in_features; ++k)
        packed_.data()[((n / width) * octets + k / 8) * width + n % width] |= int_groups_q(*w, n, k) << (4 * (k % 8));
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t i = kernels::cpu::w4_param_index(shape_, n, g);
        scale_.data()[i] = w->scales[n * groups + g];
        zero_.data()[i] = w->zeros[n * groups + g];
      }
    }
  }

  static kernels::cpu::W4Shape shape_of(const llmk_linear_desc& d, const nlohmann::json& options) {
    check_option_keys(options, {"group_size", "range", "activations", "float_layers", "matmul"}, d);
    float_layers(options, {}, d);
    range_of(d, options);
    activations_of(d, options);
    linear_options::choice_option(options, "matmul", "auto", kMatmulChoices, d);
    int64_t group = 128;
    if (options.contains("group_size")) {
      if (!options["group_size"].is_number_integer() || options["group_size"].get<int64_t>() <= 0)
        throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT, layer_name(d) + ": option group_size must be a positive integer");
      group = options["group_size"].get<int64_t>();
    }
    const kernels::cpu::W4Shape s{d.in_features, d.out_features, std::min<int64_t>(group, d.in_features)};
    if (!s.valid())
      throw plugin::Error(LLMK_ERR_UNSUPPORTED, layer_name(d) + ": group_size " + std::to_string(group) +
                                                    " must be a multiple of 8 or at least in_features (" +
                                                    std::to_string(d.in_features) + ")");
    return s;
  }

  static kernels::cpu::W4Range range_of(const llmk_linear_desc& d, const nlohmann::json& options) {
    if (!options.contains("range")) return kernels::cpu::W4Range::mse;
    const auto& r = options["range"];
    if (r == "mse") return kernels::cpu::W4Range::mse;
    if (r == "min_max") return kernels::cpu::W4Range::min_max;
    throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT,
                        layer_name(d) + ": option range must be \"mse\" or \"min_max\", got " + r.dump());
  }

  static inline const std::vector<std::string> kMatmulChoices = {"auto", "own", "amx", "amx_model"};

  static kernels::cpu::W4Matmul matmul_of(const llmk_linear_desc& d, const nlohmann::json& options,
                                           const kernels::cpu::W4Shape& shape) {
    using kernels::cpu::W4Matmul;
    const std::string m = linear_options::choice_option(options, "matmul", "auto", kMatmulChoices, d);
    if (m == "own") return W4Matmul::vector;
    const bool int8 = activations_of(d, options) == kernels::cpu::W4Activations::int8;
    if (m == "auto")
      return int8 && kernels::cpu::w4_amx_shape(shape) && kernels::cpu::w4_amx_available() ? W4Matmul::amx
                                                                                              : W4Matmul::vector;
    auto refuse = [&](const std::string& why) {
      throw plugin::Error(LLMK_ERR_UNSUPPORTED, layer_name(d) + ": matmul " + m + ": " + why);
    };
    if (!int8) refuse("the tiles multiply int8 activations (option activations is f32)");
    if (!kernels::cpu::w4_amx_shape(shape))
      refuse("in_features (" + std::to_string(shape.in_features) + ") and group_size (" +
             std::to_string(shape.group_size) + ") must be multiples of 64, group_size at most 512");
    if (m == "amx" && !kernels::cpu::w4_amx_available())
      refuse("this CPU has no AMX-INT8 tile unit (or the kernel did not grant its tile state)");
    if (m == "amx_model" && !kernels::cpu::w4_amx_built())
      refuse("this plugin file's CPU level has no tile kernel (it needs AVX-512)");
    return m == "amx" ? W4Matmul::amx : W4Matmul::amx_model;
  }

  static kernels::cpu::W4Activations activations_of(const llmk_linear_desc& d, const nlohmann::json& options) {
    if (!options.contains("activations")) return kernels::cpu::W4Activations::int8;
    const auto& a = options["activations"];
    if (a == "f32") return kernels::cpu::W4Activations::f32;
    if (a == "int8") return kernels::cpu::W4Activations::int8;
    throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT,
                        layer_name(d) + ": option activations must be \"f32\" or \"int8\", got " + a.dump());
  }

  int threads_;
  kernels::cpu::W4Shape shape_;
  kernels::cpu::W4Activations activations_ = kernels::cpu::W4Activations::int8;
  kernels::cpu::W4Matmul matmul_ = kernels::cpu::W4Matmul::vector;
  std::unique_ptr<FloatLayer> float_;
  InputGather gather_;  // act-order weights: x gathered by the input order first
  StreamArray<uint32_t> packed_;  // [num_panels16(out), k_pad / 8, 16], 8 nibbles per word
  StreamArray<float> scale_;      // [num_panels16(out), num_groups, 16]
  StreamArray<uint8_t> zero_;     // [num_panels16(out), num_groups, 16]
};

}  // namespace llmk::quant

LLMK_EXPORT_LINEAR_PLUGIN(llmk::quant::LinearInt4)
