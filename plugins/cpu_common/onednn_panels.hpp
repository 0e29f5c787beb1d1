// oneDNN's matmul over the CPU linear plugins' packed weights, read in place.
//
// Two panel layouts of kernels/cpu are, byte for byte, weight layouts that
// oneDNN's blocked ("brgemm") matmul takes, once in_features is a multiple
// of the layout's K block (tests/plugins/test_onednn_panels.cpp checks both
// against oneDNN's own reorder):
//   BF16 k-pair panels (kernels/cpu/linear_bf16_pairs.hpp) = BA16a64b2a, K % 32 == 0
//   W8A8 panels        (kernels/cpu/linear_w8a8.hpp)       = BA16a16b4a, K % 64 == 0
// So a plugin can hand its many-row products to oneDNN, which runs them on
// the AMX tiles of a Sapphire Rapids-class CPU (on AVX512-BF16/VNNI
// elsewhere), without a second copy of the weights, while it keeps streaming
// the same panels with its own kernels for decode.
//
// oneDNN 2.6's blocked matmul takes no run-time row count: one primitive per
// row bucket (padded_rows), each made the first time a forward needs it and
// kept. Callers pass activations and results padded to the bucket; the
// padding rows' results are garbage and never read.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>  // std::once_flag
#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "plugins/cpu_common/omp_team.hpp"

namespace llmk::cpu_common {

enum class PanelsLayout {
  bf16_pairs,  // weights BF16, activations BF16, results F32
  w8a8,        // weights S8, activations U8 (q + 128), results S32
};

class OnednnPanelsMatmul {
 public:
  // A matmul of up to max_rows rows over `panels` (panel_bytes long, owned
  // by the caller and alive as long as this). Null, with the reason in `why`,
  // where oneDNN has no blocked kernel for it on this CPU (it then offers
  // only its reference code, never used here), in_features is not a multiple
  // of the K block, or the layouts' sizes disagree. accept_reference: take
  // oneDNN's reference code too (tests: it reads the same blocked layout, so
  // the whole path runs on any CPU, slowly).
  static std::unique_ptr<OnednnPanelsMatmul> make(PanelsLayout layout, const void* panels, size_t panel_bytes,
                                                  int64_t in_features, int64_t out_features, int64_t max_rows,
                                                  int num_threads, std::string& why, bool accept_reference = false);

  // Whether oneDNN runs on AMX tiles on this CPU (the OS granting them):
  // plugins ask before making anything for their default choice.
  static bool amx_available();

  // oneDNN's name for its kernel (e.g. "brg:avx512_core_amx_bf16").
  const std::string& implementation() const { return implementation_; }
  bool on_amx() const { return implementation_.find("amx") != std::string::npos; }

  // The rows a forward of `rows` rows computes: its bucket.
  static int64_t padded_rows(int64_t rows);

  // dst[0:padded_rows(rows)] = src[0:padded_rows(rows)] x W. src: [padded, in]
  // (BF16 bits or U8), dst: [padded, out] (F32 or S32), both dense rows.
  // One call at a time (a layer's forwards are).
  void multiply(const void* src, int64_t rows, void* dst);

 private:
  OnednnPanelsMatmul() = default;
  struct Descs {
    dnnl::memory::desc src, weights, dst;
  };
  Descs descs(int64_t rows) const;  // activations [rows, in], the panels, results [rows, out]
  dnnl::matmul::primitive_desc describe(const Descs& d) const;

  PanelsLayout layout_ = PanelsLayout::bf16_pairs;
  int64_t in_ = 0, out_ = 0;
  int threads_ = 1;
  void* panels_ = nullptr;
  std::string implementation_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  // One slot per bucket up to max_rows, filled on the bucket's first
  // forward (std::call_once) and read without a lock after.
  struct Slot {
    std::once_flag made;
    std::unique_ptr<dnnl::matmul> matmul;
    std::unordered_map<int, dnnl::memory> args;  // weights bound; activations and results set per call
  };
  Slot& slot_for(int64_t padded);
  std::unique_ptr<Slot[]> slots_;
  size_t num_slots_ = 0;
};

}  // namespace llmk::cpu_common
