// Shared pieces of the quantized linear plugins (linear.int8, linear.int4,
// linear.uint8_zp): reading the checkpoint weight as f32, the plugin options,
// the per-layer float fallback and the weights' storage (stream memory,
// kernels/cpu/stream_memory.hpp). Header-only; this folder is not a plugin
// itself.
#pragma once

#include <immintrin.h>
#include <nlohmann/json.hpp>
#include <omp.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/linear_panels16.hpp"
#include "kernels/cpu/stream_memory.hpp"
#include "plugins/api/plugin_helpers.hpp"
#include "plugins/quant_common/linear_options.hpp"

namespace llmk::quant {

using linear_options::check_option_keys;
using linear_options::layer_name;
using linear_options::parse_options;
using linear_options::weight_as_f32;

using kernels::cpu::StreamArray;  // weights live in stream memory (huge pages where offered)

// "float_layers": names of layers kept in f32. An entry matches a layer whose
// dotted name equals it, ends with ".entry" or contains ".entry." (so "o_proj"
// matches "model.layers.3.self_attn.o_proj" and "lm_head" matches "lm_head").
inline std::vector<std::string> float_layers(const nlohmann::json& options, std::vector<std::string> defaults,
                                             const llmk_linear_desc& d) {
  if (!options.contains("float_layers")) return defaults;
  const auto& list = options["float_layers"];
  if (!list.is_array())
    throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT, layer_name(d) + ": option float_layers must be a list of names");
  std::vector<std::string> out;
  for (const auto& e : list) {
    if (!e.is_string())
      throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT, layer_name(d) + ": option float_layers must be a list of names");
    out.push_back(e.get<std::string>());
  }
  return out;
}

inline bool layer_matches(const std::string& name, const std::vector<std::string>& entries) {
  for (const auto& e : entries) {
    if (e.empty()) continue;
    if (name == e || name.find("." + e + ".") != std::string::npos) return true;
    if (name.size() > e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0 &&
        name[name.size() - e.size() - 1] == '.')
      return true;
  }
  return false;
}

// Common shape checks; a reason in `why` and false when the desc cannot be served.
inline bool check_desc(const llmk_linear_desc& d, std::string& why) {
  if (!plugin::cpu_f32_linear(d, why)) return false;
  if (d.in_features == 0 || d.out_features == 0) {
    why = layer_name(d) + ": empty weight";
    return false;
  }
  if (d.weight_dtype != LLMK_DTYPE_F32 && d.weight_dtype != LLMK_DTYPE_F16 && d.weight_dtype != LLMK_DTYPE_BF16) {
    why = layer_name(d) + ": weight dtype must be f32, f16 or bf16";
    return false;
  }
  return true;
}

inline int thread_count(const llmk_linear_desc& d) {
  return d.num_threads > 0 ? static_cast<int>(d.num_threads) : omp_get_max_threads();
}

// A layer kept in float, in the checkpoint's own precision (f32, f16 or
// bf16 panels, kernels/cpu/linear_panels16.hpp): no rounding beyond what the
// checkpoint stores, and no more memory than it.
class FloatLayer {
 public:
  FloatLayer(const llmk_linear_desc& d, int num_threads)
      : in_(d.in_features), out_(d.out_features), threads_(num_threads) {
    const size_t count = kernels::cpu::panels16_size(out_, in_);
    if (d.weight_dtype == LLMK_DTYPE_F32) {
      dtype_ = LLMK_DTYPE_F32;
      f32_ = StreamArray<float>(count);
      kernels::cpu::pack_panels16(static_cast<const float*>(d.weight), out_, in_, f32_.data());
      return;
    }
    if (d.weight_dtype != LLMK_DTYPE_F16 && d.weight_dtype != LLMK_DTYPE_BF16) weight_as_f32(d);  // throws, naming it
    dtype_ = static_cast<llmk_dtype>(d.weight_dtype);  // F16 or BF16, checked above
    half_ = StreamArray<uint16_t>(count);
    kernels::cpu::pack_panels16(static_cast<const uint16_t*>(d.weight), out_, in_, half_.data());
  }
  void forward(const float* x, float* y, int64_t num_rows) const {
    const void* packed = dtype_ == LLMK_DTYPE_F32 ? static_cast<const void*>(f32_.data())
                                                  : static_cast<const void*>(half_.data());
    kernels::cpu::linear_panels16(x, num_rows, in_, packed, dtype_, out_, y, threads_);  // dtype_ is one it serves
  }
  size_t weight_bytes() const { return f32_.bytes() + half_.bytes(); }

 private:
  int64_t in_, out_;
  int threads_;
  llmk_dtype dtype_ = LLMK_DTYPE_F32;
  StreamArray<float> f32_;      // [panels16_size(out, in)] when the checkpoint is f32
  StreamArray<uint16_t> half_;  // the same in f16 or bf16 bits otherwise
};

}  // namespace llmk::quant
