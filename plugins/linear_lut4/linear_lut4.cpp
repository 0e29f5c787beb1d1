// linear.lut4: lookup-table 4-bit weights, a block scale times one of 16
// codebook values per weight (kernels/cpu/linear_lut4.hpp): NF4
// (bitsandbytes' NormalFloat) or IQ4_NL (ggml's non-linear levels), one
// kernel family for both.
//
// Weights arrive as floats (f32, f16, bf16), quantized at create, or as a
// GGUF file's IQ4_NL blocks (linear API 3.1, weight dtype ggml:IQ4_NL),
// computed on as stored (regrouped, not requantized; block 32, codebook
// iq4_nl whatever the options say).
//
// Options: {"codebook": "iq4_nl", "block_size": 32, "scale": "search",
// "activations": "int8", "float_layers": []}.
//   codebook    "iq4_nl" or "nf4";
//   block_size  inputs per scale: 32, or a multiple of 64 up to 4096
//               (default 32 for iq4_nl, as ggml's blocks; 64 for nf4, as
//               bitsandbytes' default);
//   scale       "absmax" (the block's largest |w| on the codebook's end, each
//               weight to its nearest value: bitsandbytes' NF4) or "search"
//               (ggml's IQ4_NL way: scales around absmax's, each refitted
//               by least squares, the least squared error kept); default
//               search for iq4_nl, absmax for nf4;
//   activations "int8" (rows rounded per 32 inputs, integer dot products
//               with the codebook's int8 levels; nf4's levels are its values
//               on a 1/127 grid; the weight repacked into 16-channel panels,
//               kernels/cpu/linear_lut4_panels.hpp) or "f32" (the exact
//               values, on the units);
//   float_layers as linear.int4's: layers kept in the checkpoint's precision.
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/linear_lut4.hpp"
#include "kernels/cpu/linear_lut4_panels.hpp"
#include "plugins/quant_common/linear_common.hpp"

namespace llmk::quant {

class LinearLut4 {
 public:
  static constexpr const char* kName = "linear.lut4";
  static constexpr const char* kVersion = "1.1.0";
  static constexpr const char* kDescription =
      "Lookup-table 4-bit weights (NF4 or IQ4_NL codebook, block scales; GGUF IQ4_NL as stored); activations int8 "
      "per 32 (or f32)";
  static constexpr const char* kCapabilities =
      R"({"weight_dtypes":["f32","f16","bf16","ggml:IQ4_NL"],"scheme":"lut4","options":{"codebook":"iq4_nl","block_size":32,"scale":"search","activations":"int8","float_layers":[]}})";

  static constexpr uint32_t kIq4NlDtype = LLMK_DTYPE_GGML_BASE + 20;  // ggml type id of IQ4_NL

  static bool supports(const llmk_linear_desc& d, std::string& why) {
    if (d.weight_dtype == kIq4NlDtype) {
      if (!plugin::cpu_f32_linear(d, why)) return false;
    } else if (!check_desc(d, why)) {
      if (d.weight_dtype >= LLMK_DTYPE_GGML_BASE)
        why = layer_name(d) + ": weight dtype " + std::to_string(d.weight_dtype) +
              " is not a ggml block type this plugin computes on (IQ4_NL only)";
      return false;
    }
    try {
      const Config c = config_of(d);
      if (c.float_layer) return true;
      if (d.weight_dtype == kIq4NlDtype && d.in_features % 32 != 0)
        throw plugin::Error(LLMK_ERR_UNSUPPORTED, layer_name(d) + ": in_features " + std::to_string(d.in_features) +
                                                      " is not a multiple of 32");
    } catch (const std::exception& e) {
      why = e.what();
      return false;
    }
    return true;
  }

  explicit LinearLut4(const llmk_linear_desc& d) : threads_(thread_count(d)) {
    const Config c = config_of(d);
    if (c.float_layer) {
      float_ = std::make_unique<FloatLayer>(d, threads_);
      return;
    }
    book_ = c.book;
    activations_ = c.activations;
    shape_ = kernels::cpu::Lut4Shape{d.in_features, d.out_features, c.block_size};
    std::vector<uint8_t> units(kernels::cpu::lut4_size(shape_));
    if (d.weight_dtype == kIq4NlDtype) {
      kernels::cpu::pack_lut4_iq4_nl(d.weight, shape_, units.data(), threads_);
    } else {
      const std::vector<float> w = weight_as_f32(d);
      std::vector<uint8_t> q(w.size());
      std::vector<float> scale(static_cast<size_t>(shape_.out_features * shape_.num_blocks()));
      kernels::cpu::quantize_lut4(w.data(), shape_, book_, c.scale, q.data(), scale.data(), threads_);
      kernels::cpu::pack_lut4(q.data(), scale.data(), shape_, units.data());
    }
    // int8 rows run on 16-channel panels (kernels/cpu/linear_lut4_panels.hpp); f32 rows on the units.
    if (activations_ == kernels::cpu::Lut4Activations::int8) {
      packed_ = StreamArray<uint8_t>(kernels::cpu::lut4_panels_size(shape_));
      kernels::cpu::pack_lut4_panels(units.data(), shape_, packed_.data(), threads_);
    } else {
      packed_ = StreamArray<uint8_t>(units.size());
      std::memcpy(packed_.data(), units.data(), units.size());
    }
  }

  size_t workspace_bytes(uint32_t num_rows) const {
    if (float_) return 0;
    if (activations_ == kernels::cpu::Lut4Activations::int8)
      return kernels::cpu::lut4_panels_scratch_size(shape_, std::max<uint32_t>(num_rows, 1), threads_);
    return kernels::cpu::lut4_scratch_size(shape_, std::max<uint32_t>(num_rows, 1), activations_, threads_);
  }

  // CPU, F32 (supports() refuses anything else): x and y are floats; no queue.
  void forward(const void* x_in, void* y_out, uint32_t num_rows, void* workspace, void* /*stream*/) {
    const auto* x = static_cast<const float*>(x_in);
    auto* y = static_cast<float*>(y_out);
    if (num_rows == 0) return;
    if (float_) return float_->forward(x, y, num_rows);
    if (activations_ == kernels::cpu::Lut4Activations::int8)
      return kernels::cpu::linear_lut4_panels(x, num_rows, shape_, book_, packed_.data(), y, workspace, threads_);
    kernels::cpu::linear_lut4(x, num_rows, shape_, book_, packed_.data(), y, workspace, threads_, activations_);
  }

  size_t weight_bytes() const { return float_ ? float_->weight_bytes() : packed_.bytes(); }

 private:
  struct Config {
    bool float_layer = false;
    kernels::cpu::Lut4Book book = kernels::cpu::Lut4Book::iq4_nl;
    int64_t block_size = 32;
    kernels::cpu::Lut4Scale scale = kernels::cpu::Lut4Scale::search;
    kernels::cpu::Lut4Activations activations = kernels::cpu::Lut4Activations::int8;
  };

  // The options, checked; stored IQ4_NL blocks fix the codebook and block size.
  static Config config_of(const llmk_linear_desc& d) {
    using namespace kernels::cpu;
    const auto options = parse_options(d);
    check_option_keys(options, {"codebook", "block_size", "scale", "activations", "float_layers"}, d);
    Config c;
    const bool nf4 = linear_options::choice_option(options, "codebook", "iq4_nl", {"iq4_nl", "nf4"}, d) == "nf4";
    c.book = nf4 ? Lut4Book::nf4 : Lut4Book::iq4_nl;
    c.block_size = nf4 ? 64 : 32;
    if (options.contains("block_size")) {
      const auto& b = options["block_size"];
      if (!b.is_number_integer() || !Lut4Shape{32, 1, b.get<int64_t>()}.valid())
        throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT, layer_name(d) + ": option block_size must be 32 or a multiple "
                                                                       "of 64 up to 4096, got " + b.dump());
      c.block_size = b.get<int64_t>();
    }
    c.scale = linear_options::choice_option(options, "scale", nf4 ? "absmax" : "search", {"absmax", "search"}, d) ==
                      "absmax"
                  ? Lut4Scale::absmax
                  : Lut4Scale::search;
    c.activations = linear_options::choice_option(options, "activations", "int8", {"int8", "f32"}, d) == "f32"
                        ? Lut4Activations::f32
                        : Lut4Activations::int8;
    if (d.weight_dtype == kIq4NlDtype) {
      c.book = Lut4Book::iq4_nl;
      c.block_size = 32;
      return c;
    }
    c.float_layer = layer_matches(layer_name(d), float_layers(options, {}, d));
    return c;
  }

  int threads_;
  kernels::cpu::Lut4Book book_ = kernels::cpu::Lut4Book::iq4_nl;
  kernels::cpu::Lut4Activations activations_ = kernels::cpu::Lut4Activations::int8;
  kernels::cpu::Lut4Shape shape_;
  std::unique_ptr<FloatLayer> float_;
  // int8 activations: lut4 panels (kernels/cpu/linear_lut4_panels.hpp); f32: [out_features][num_units]
  // units of 36 bytes (kernels/cpu/linear_lut4.hpp).
  StreamArray<uint8_t> packed_;
};

}  // namespace llmk::quant

LLMK_EXPORT_LINEAR_PLUGIN(llmk::quant::LinearLut4)
