// linear.gguf: a GGUF file's quantized weights computed on as stored
// (kernels/cpu/linear_gguf.hpp): the blocks' integers meet int8 activations,
// nothing is dequantized to floats. It serves weights whose dtype names
// ggml blocks of a type its kernels cover (linear API 3.1) and refuses the
// rest, which the host then dequantizes for plugins.linear
// (core/model_weights.hpp): the host hands it a GGUF's quantized weights by
// default (plugins.linear_blocks).
//
// At create the blocks are copied into the kernels' packed layout (the same
// integers and scales, regrouped); each forward rounds the activations to
// int8 in blocks of the weight's block size. No options.
#include <string>

#include "kernels/cpu/linear_gguf.hpp"
#include "plugins/quant_common/linear_common.hpp"

namespace llmk::quant {

class LinearGguf {
 public:
  static constexpr const char* kName = "linear.gguf";
  static constexpr const char* kVersion = "1.0.0";
  static constexpr const char* kDescription =
      "GGUF quantized weights as stored (Q8_0, Q4_K, Q5_K, Q6_K, ...), int8 activations, integer dot products";
  static constexpr const char* kCapabilities =
      R"({"weight_dtypes":["ggml:Q4_0","ggml:Q4_1","ggml:Q5_0","ggml:Q5_1","ggml:Q8_0","ggml:Q4_K","ggml:Q5_K","ggml:Q6_K"],"devices":["cpu"],"scheme":"ggml_a8","options":{}})";

  static bool supports(const llmk_linear_desc& d, std::string& why) {
    if (!plugin::cpu_f32_linear(d, why)) return false;
    if (d.in_features == 0 || d.out_features == 0) {
      why = layer_name(d) + ": empty weight";
      return false;
    }
    if (d.weight_dtype < LLMK_DTYPE_GGML_BASE ||
        !kernels::cpu::gguf_quant_supported(d.weight_dtype - LLMK_DTYPE_GGML_BASE)) {
      why = layer_name(d) + ": weight dtype " + std::to_string(d.weight_dtype) +
            " is not a ggml block type this plugin computes on";
      return false;
    }
    const int64_t block = kernels::cpu::gguf_block_elems(type(d));
    if (d.in_features % block != 0) {
      why = layer_name(d) + ": in_features " + std::to_string(d.in_features) + " is not a multiple of the block size " +
            std::to_string(block);
      return false;
    }
    try {
      check_option_keys(parse_options(d), {}, d);
    } catch (const std::exception& e) {
      why = e.what();
      return false;
    }
    return true;
  }

  explicit LinearGguf(const llmk_linear_desc& d)
      : type_(type(d)), in_(d.in_features), out_(d.out_features), threads_(thread_count(d)) {
    packed_ = StreamArray<uint8_t>(kernels::cpu::gguf_packed_size(type_, out_, in_));
    kernels::cpu::gguf_pack(type_, d.weight, out_, in_, packed_.data(), threads_);
  }

  size_t workspace_bytes(uint32_t num_rows) const {
    return kernels::cpu::gguf_scratch_size(type_, std::max<uint32_t>(num_rows, 1), in_);
  }

  // CPU, F32 (supports() refuses anything else): x and y are floats; no queue.
  void forward(const void* x, void* y, uint32_t num_rows, void* workspace, void* /*stream*/) {
    if (num_rows == 0) return;
    kernels::cpu::linear_gguf(type_, static_cast<const float*>(x), num_rows, in_, packed_.data(), out_,
                              static_cast<float*>(y), workspace, threads_);
  }

  size_t weight_bytes() const { return packed_.bytes(); }

 private:
  static kernels::cpu::GgufQuant type(const llmk_linear_desc& d) {
    return static_cast<kernels::cpu::GgufQuant>(d.weight_dtype - LLMK_DTYPE_GGML_BASE);
  }

  kernels::cpu::GgufQuant type_;
  int64_t in_, out_;
  int threads_;
  StreamArray<uint8_t> packed_;
};

}  // namespace llmk::quant

LLMK_EXPORT_LINEAR_PLUGIN(llmk::quant::LinearGguf)
