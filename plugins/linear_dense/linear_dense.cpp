// linear.dense: y = x W^T with unquantized weights. Every path is exact
// (weights widened to F32 in registers, F32 accumulation) except the BF16
// GEMM, which computes as a BF16 model does.
//
// Layouts (weight_bytes() reports the stored size):
//   Default, every dtype: repacked at load into 64-column panels
//     (kernels/cpu/linear_panels64.hpp) at the stored element size (F32 4
//     bytes, F16/BF16 2 bytes per weight), multiplied by linear_panels64 for
//     every row count: exact, F32 FMA on weights widened in registers. On
//     this class of CPU (AVX-512, 2 cores) it streams decode weights 25-35%
//     faster than row-major dot products (one sequential stream per thread;
//     the AVX2 level adds a software prefetch, AVX-512 leaves it to the
//     hardware prefetcher, measured faster on Zen 4) and runs 1.2x (128 rows) to 2.5x (8-32 rows) faster
//     than the alternatives for F32; F16 needs no F16 GEMM units (none here).
//     On an AVX2-only Zen 3 (2 cores) the 128-row F32 GEMM runs at about 0.93x
//     oneDNN's sgemm ({"f32_layout":"rows"}) over llama-110m's layer shapes.
//     The cost: weights are copied, never borrowed from the checkpoint's
//     mapping (whose pages the kernel may then drop).
//   {"f32_layout":"rows"}: F32 kept as stored, borrowed when it outlives the
//     layer (no copy): linear_rows below gemm_min_rows (default 64), a oneDNN
//     F32 matmul with a run-time row count from there on.
//   {"bf16_activations":true}: BF16 repacked into k-pair panels
//     (kernels/cpu/linear_bf16_pairs.hpp); from gemm_min_rows rows (default 16)
//     on, the activations are rounded to BF16 and multiplied on the AVX-512
//     BF16 dot-product units, F32 accumulation: not exact (what a BF16 model
//     computes); fewer rows stream the same panels exactly. One layout
//     serves decode streaming and batched GEMMs.
//   {"bf16_layout":"rows"}: BF16 kept as stored (borrowed or copied):
//     linear_rows below gemm_min_rows (default 16), then a oneDNN matmul that
//     rounds activations to BF16 and multiplies on the AVX-512 BF16 units
//     with F32 accumulation: ~1.6x the panel rate at 128 rows (prefill), not
//     exact (what a BF16 model computes anyway).
//   {"matmul":"auto"|"own"|"onednn"}: who multiplies the k-pair panels' many-row
//     products (bf16_activations). auto (default): oneDNN's blocked matmul
//     where it runs on AMX tiles (Sapphire Rapids class), reading the same
//     panels in place (plugins/cpu_common/onednn_panels.hpp), else the
//     plugin's own kernels; own: always the plugin's; onednn: oneDNN's
//     wherever it has a blocked kernel (AMX or AVX512-BF16), refused where it
//     has none. Needs in_features a multiple of 32 (else the plugin's own).
//   {"weight_dtype":"bf16"}: F32 checkpoints rounded once to BF16 and then
//     treated as a BF16 checkpoint (half the bytes per decode step; not
//     exact, so opt-in).

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/linear_bf16_pairs.hpp"
#include "kernels/cpu/linear_panels64.hpp"
#include "kernels/cpu/linear_rows.hpp"
#include "kernels/cpu/stream_memory.hpp"
#include "plugins/api/plugin_helpers.hpp"
#include "plugins/cpu_common/onednn_panels.hpp"

namespace llmk::linear_dense {

namespace {



using plugin::Error;
using cpu_common::OnednnPanelsMatmul;

enum class Matmul { automatic, own, onednn };

struct Options {
  bool store_bf16 = false;  // round F32 weights to BF16 at load
  uint32_t gemm_min_rows = 0;  // 0: by dtype
  bool f32_rows = false;       // F32 kept as stored (borrowed) instead of repacked into panels
  bool bf16_rows = false;      // BF16 kept as stored: oneDNN BF16 GEMM for many rows
  bool bf16_activations = false;  // BF16 panels: many-row GEMMs on the BF16 dot units
  Matmul matmul = Matmul::automatic;  // who multiplies the BF16 panels' many-row products
};

Options parse_options(const char* text, const char* layer) {
  Options o;
  if (text == nullptr || *text == '\0') return o;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw Error(LLMK_ERR_INVALID_ARGUMENT, std::string("linear.dense options for ") + layer + ": " + e.what());
  }
  if (!j.is_object()) throw Error(LLMK_ERR_INVALID_ARGUMENT, "linear.dense options must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key == "weight_dtype") {
      const std::string v = value.get<std::string>();
      if (v == "bf16") o.store_bf16 = true;
      else if (v != "auto") throw Error(LLMK_ERR_INVALID_ARGUMENT, "linear.dense option weight_dtype must be auto or bf16, got " + v);
    } else if (key == "f32_layout") {
      const std::string v = value.get<std::string>();
      if (v == "rows") o.f32_rows = true;
      else if (v != "panels") throw Error(LLMK_ERR_INVALID_ARGUMENT, "linear.dense option f32_layout must be rows or panels, got " + v);
    } else if (key == "bf16_layout") {
      const std::string v = value.get<std::string>();
      if (v == "rows") o.bf16_rows = true;
      else if (v != "panels") throw Error(LLMK_ERR_INVALID_ARGUMENT, "linear.dense option bf16_layout must be rows or panels, got " + v);
    } else if (key == "gemm_min_rows") {
      o.gemm_min_rows = value.get<uint32_t>();
    } else if (key == "bf16_activations") {
      if (!value.is_boolean())
        throw Error(LLMK_ERR_INVALID_ARGUMENT, "linear.dense option bf16_activations must be true or false");
      o.bf16_activations = value.get<bool>();
    } else if (key == "matmul") {
      const std::string v = value.is_string() ? value.get<std::string>() : value.dump();
      if (v == "auto") o.matmul = Matmul::automatic;
      else if (v == "own") o.matmul = Matmul::own;
      else if (v == "onednn") o.matmul = Matmul::onednn;
      else throw Error(LLMK_ERR_INVALID_ARGUMENT, "linear.dense option matmul must be auto, own or onednn, got " + v);
    } else {
      throw Error(LLMK_ERR_INVALID_ARGUMENT, "linear.dense has no option '" + key +
                                                 "' (known: weight_dtype, f32_layout, bf16_layout, bf16_activations, "
                                                 "matmul, gemm_min_rows)");
    }
  }
  if (o.bf16_activations && o.bf16_rows)
    throw Error(LLMK_ERR_INVALID_ARGUMENT,
                "linear.dense option bf16_activations is for BF16 panels; bf16_layout rows already rounds activations");
  if (o.matmul == Matmul::onednn && !o.bf16_activations)
    throw Error(LLMK_ERR_INVALID_ARGUMENT,
                "linear.dense option matmul onednn multiplies BF16 panels with bf16_activations; set that too");
  return o;
}

}  // namespace

class LinearDense {
 public:
  static constexpr const char* kName = "linear.dense";
  static constexpr const char* kVersion = "1.0.0";
  static constexpr const char* kDescription =
      "Dense F32/F16/BF16 weights: AVX-512 panel GEMV/GEMM, BF16 dot products or oneDNN by option";
  static constexpr const char* kCapabilities =
      R"({"weight_dtypes":["f32","f16","bf16"],"devices":["cpu"],"options":["weight_dtype","f32_layout","bf16_layout","bf16_activations","matmul","gemm_min_rows"]})";

  static bool supports(const llmk_linear_desc& d, std::string& why) {
    if (!plugin::cpu_f32_linear(d, why)) return false;
    if (d.weight_dtype != LLMK_DTYPE_F32 && d.weight_dtype != LLMK_DTYPE_F16 && d.weight_dtype != LLMK_DTYPE_BF16) {
      why = "weight dtype " + std::to_string(d.weight_dtype) + " is not dense f32/f16/bf16";
      return false;
    }
    if (d.in_features == 0 || d.out_features == 0 || d.weight == nullptr) {
      why = "empty weight";
      return false;
    }
    return true;
  }

  explicit LinearDense(const llmk_linear_desc& d)
      : in_(d.in_features), out_(d.out_features), threads_(static_cast<int>(std::max<uint32_t>(1, d.num_threads))) {
    std::string why;
    if (!supports(d, why)) throw Error(LLMK_ERR_UNSUPPORTED, std::string(d.name ? d.name : "?") + ": " + why);
    const Options opt = parse_options(d.options, d.name ? d.name : "?");
    const size_t n = static_cast<size_t>(in_) * out_;
    dtype_ = static_cast<llmk_dtype>(d.weight_dtype);
    const void* src = d.weight;
    bool src_outlives = d.weight_outlives != 0;
    std::vector<uint16_t> rounded;
    if (dtype_ == LLMK_DTYPE_F32 && opt.store_bf16) {
      rounded.resize(n);
      kernels::cpu::f32_to_bf16(static_cast<const float*>(d.weight), rounded.data(), static_cast<int64_t>(n));
      dtype_ = LLMK_DTYPE_BF16;
      src = rounded.data();
      src_outlives = false;
    }
    if (opt.bf16_activations && dtype_ != LLMK_DTYPE_BF16)
      throw Error(LLMK_ERR_INVALID_ARGUMENT, std::string(d.name ? d.name : "?") +
                                                 ": bf16_activations needs BF16 weights (a BF16 checkpoint or "
                                                 "weight_dtype bf16)");
    bf16_dot_ = opt.bf16_activations;
    if (dtype_ == LLMK_DTYPE_F32 && !opt.f32_rows) {
      owned_ = kernels::cpu::StreamArray<uint8_t>(kernels::cpu::panels64_size(out_, in_) * 4);
      kernels::cpu::pack_panels64(static_cast<const float*>(d.weight), out_, in_,
                                  reinterpret_cast<float*>(owned_.data()));
      weight_ = owned_.data();
      packed_ = true;
    } else if (bf16_dot_) {
      owned_ = kernels::cpu::StreamArray<uint8_t>(kernels::cpu::bf16_pairs_size(out_, in_) * 2);
      kernels::cpu::pack_bf16_pairs(static_cast<const uint16_t*>(src), out_, in_,
                                    reinterpret_cast<uint16_t*>(owned_.data()));
      weight_ = owned_.data();
      packed_ = true;
    } else if (dtype_ == LLMK_DTYPE_F16 || (dtype_ == LLMK_DTYPE_BF16 && !opt.bf16_rows)) {
      owned_ = kernels::cpu::StreamArray<uint8_t>(kernels::cpu::panels64_size(out_, in_) * 2);
      kernels::cpu::pack_panels64(static_cast<const uint16_t*>(src), out_, in_,
                                  reinterpret_cast<uint16_t*>(owned_.data()));
      weight_ = owned_.data();
      packed_ = true;
    } else if (src_outlives) {
      weight_ = src;
    } else {
      const size_t bytes = n * (dtype_ == LLMK_DTYPE_F32 ? 4 : 2);
      owned_ = kernels::cpu::StreamArray<uint8_t>(bytes);
      std::memcpy(owned_.data(), src, bytes);
      weight_ = owned_.data();
    }
    bytes_ = packed_ ? owned_.size() : n * (dtype_ == LLMK_DTYPE_F32 ? 4 : 2);
    gemm_min_rows_ = opt.gemm_min_rows != 0 ? opt.gemm_min_rows : (dtype_ == LLMK_DTYPE_F32 ? 64 : 16);
    if (!packed_ && d.max_rows >= gemm_min_rows_) make_gemm(d.name ? d.name : "?");
    const bool want_onednn = opt.matmul == Matmul::onednn ||
                             (opt.matmul == Matmul::automatic && OnednnPanelsMatmul::amx_available());
    if (bf16_dot_ && want_onednn && d.max_rows >= gemm_min_rows_) {
      std::string why;
      matmul_ = OnednnPanelsMatmul::make(cpu_common::PanelsLayout::bf16_pairs, owned_.data(), owned_.size(), in_, out_,
                                         d.max_rows, threads_, why);
      if (matmul_ && opt.matmul == Matmul::automatic && !matmul_->on_amx()) matmul_.reset();
      if (!matmul_ && opt.matmul == Matmul::onednn)
        throw Error(LLMK_ERR_UNSUPPORTED, std::string(d.name ? d.name : "?") + ": matmul onednn: " + why);
    }
  }

  // BF16 activations (the k-pair panels' GEMM path and the oneDNN BF16
  // GEMM), or linear_panels64's per-thread scratch.
  size_t workspace_bytes(uint32_t num_rows) const {
    if (matmul_ && num_rows >= gemm_min_rows_) {  // BF16 rows, then F32 results, both padded to the row bucket
      const auto padded = static_cast<size_t>(OnednnPanelsMatmul::padded_rows(num_rows));
      return padded * in_ * sizeof(uint16_t) + padded * out_ * sizeof(float);
    }
    if (bf16_dot_)
      return num_rows >= gemm_min_rows_ ? kernels::cpu::bf16_pairs_scratch_size(num_rows, in_) * sizeof(uint16_t) : 0;
    if (packed_) return kernels::cpu::panels64_scratch_size(threads_) * sizeof(float);
    if (gemm_ && dtype_ != LLMK_DTYPE_F32 && num_rows >= gemm_min_rows_)
      return static_cast<size_t>(num_rows) * in_ * sizeof(uint16_t);
    return 0;
  }

  // CPU, F32 (supports() refuses anything else): x and y are floats; no queue.
  void forward(const void* x_in, void* y_out, uint32_t num_rows, void* workspace, void* /*stream*/) {
    const auto* x = static_cast<const float*>(x_in);
    auto* y = static_cast<float*>(y_out);
    if (num_rows == 0) return;
    if (matmul_ && num_rows >= gemm_min_rows_) {
      // Rounded as linear_bf16_pairs rounds them; the bucket's padding rows zero.
      const int64_t padded = OnednnPanelsMatmul::padded_rows(num_rows);
      auto* act = static_cast<uint16_t*>(workspace);
      kernels::cpu::f32_to_bf16(x, act, static_cast<int64_t>(num_rows) * in_);
      std::memset(act + static_cast<size_t>(num_rows) * in_, 0, static_cast<size_t>(padded - num_rows) * in_ * 2);
      float* out = padded == num_rows ? y : reinterpret_cast<float*>(act + static_cast<size_t>(padded) * in_);
      matmul_->multiply(act, num_rows, out);
      if (out != y) std::memcpy(y, out, static_cast<size_t>(num_rows) * out_ * sizeof(float));
      return;
    }
    if (bf16_dot_) {
      const bool round = num_rows >= gemm_min_rows_;
      kernels::cpu::linear_bf16_pairs(x, num_rows, in_, static_cast<const uint16_t*>(weight_), round, out_, y,
                                      static_cast<uint16_t*>(workspace), threads_);
      return;
    }
    if (packed_) {
      kernels::cpu::linear_panels64(x, num_rows, in_, weight_, dtype_, out_, y, static_cast<float*>(workspace), threads_);
      return;
    }
    if (num_rows < gemm_min_rows_ || !gemm_) {
      kernels::cpu::linear_rows(x, num_rows, in_, weight_, dtype_, out_, y, threads_);
      return;
    }
    const cpu_common::OmpTeam team(threads_);
    using dnnl::memory;
    const memory::dims src_dims{static_cast<memory::dim>(num_rows), static_cast<memory::dim>(in_)};
    const memory::dims dst_dims{static_cast<memory::dim>(num_rows), static_cast<memory::dim>(out_)};
    memory dst(memory::desc(dst_dims, memory::data_type::f32, memory::format_tag::ab), engine_, y);
    if (dtype_ == LLMK_DTYPE_F32) {
      memory src(memory::desc(src_dims, memory::data_type::f32, memory::format_tag::ab), engine_, const_cast<float*>(x));
      gemm_->execute(stream_, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, *weights_mem_}, {DNNL_ARG_DST, dst}});
    } else {
      auto* act = static_cast<uint16_t*>(workspace);
      kernels::cpu::f32_to_bf16(x, act, static_cast<int64_t>(num_rows) * in_);
      memory src(memory::desc(src_dims, memory::data_type::bf16, memory::format_tag::ab), engine_, act);
      gemm_->execute(stream_, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, *weights_mem_}, {DNNL_ARG_DST, dst}});
    }
    stream_.wait();
  }

  size_t weight_bytes() const { return bytes_; }

 private:
  // One oneDNN matmul for any row count: src [M, K] x weights [K, N] -> dst [M, N],
  // the weights viewed in place as the transpose of the stored [N, K] rows.
  void make_gemm(const std::string& name) {
    using dnnl::memory;
    engine_ = dnnl::engine(dnnl::engine::kind::cpu, 0);
    stream_ = dnnl::stream(engine_);
    const auto dt = dtype_ == LLMK_DTYPE_F32 ? memory::data_type::f32 : memory::data_type::bf16;
    const memory::dim k = in_, n = out_;
    const memory::desc src_md({DNNL_RUNTIME_DIM_VAL, k}, dt, {k, 1});
    const memory::desc w_md({k, n}, dt, {1, k});
    const memory::desc dst_md({DNNL_RUNTIME_DIM_VAL, n}, memory::data_type::f32, {n, 1});
    dnnl::matmul::primitive_desc pd;
    try {
      pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, w_md, dst_md), engine_);
    } catch (const dnnl::error& e) {
      if (dt != memory::data_type::bf16) throw;
      // oneDNN has BF16 matmuls only where the CPU has AVX-512.
      throw Error(LLMK_ERR_UNSUPPORTED, name + ": bf16_layout rows multiplies in oneDNN's BF16 matmul, which this CPU "
                                               "lacks (" + e.what() + "); the default BF16 panels serve it");
    }
    gemm_ = std::make_unique<dnnl::matmul>(pd);
    weights_mem_ = std::make_unique<memory>(w_md, engine_, const_cast<void*>(weight_));
  }

  uint32_t in_, out_;
  int threads_;
  uint32_t gemm_min_rows_ = 16;
  llmk_dtype dtype_ = LLMK_DTYPE_F32;
  const void* weight_ = nullptr;     // [out, in] of dtype_, or panels when packed_
  bool packed_ = false;
  bool bf16_dot_ = false;            // k-pair BF16 panels: many rows on the BF16 dot units
  kernels::cpu::StreamArray<uint8_t> owned_;  // the weight when not borrowed (stream memory)
  size_t bytes_ = 0;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::unique_ptr<dnnl::matmul> gemm_;
  std::unique_ptr<dnnl::memory> weights_mem_;
  std::unique_ptr<OnednnPanelsMatmul> matmul_;  // many-row products of the BF16 panels, when oneDNN takes them
};

}  // namespace llmk::linear_dense

LLMK_EXPORT_LINEAR_PLUGIN(llmk::linear_dense::LinearDense)
