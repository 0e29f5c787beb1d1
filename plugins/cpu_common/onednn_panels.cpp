#include "plugins/cpu_common/onednn_panels.hpp"

#include <algorithm>
#include <stdexcept>

namespace llmk::cpu_common {

namespace {

using dnnl::memory;

// Buckets: multiples of 16 rows up to 128, of 64 beyond: fewer than 16
// padding rows up to 128, at most a third of the bucket beyond.
constexpr int64_t kFineRows = 128;
int64_t bucket_index(int64_t padded) { return padded <= kFineRows ? padded / 16 - 1 : 7 + (padded - kFineRows) / 64; }

}  // namespace

int64_t OnednnPanelsMatmul::padded_rows(int64_t rows) {
  rows = std::max<int64_t>(rows, 1);
  return rows <= kFineRows ? (rows + 15) / 16 * 16 : (rows + 63) / 64 * 64;
}

bool OnednnPanelsMatmul::amx_available() {
  return dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx;
}

OnednnPanelsMatmul::Descs OnednnPanelsMatmul::descs(int64_t rows) const {
  const bool bf16 = layout_ == PanelsLayout::bf16_pairs;
  return {memory::desc({rows, in_}, bf16 ? memory::data_type::bf16 : memory::data_type::u8, memory::format_tag::ab),
          memory::desc({in_, out_}, bf16 ? memory::data_type::bf16 : memory::data_type::s8,
                       bf16 ? memory::format_tag::BA16a64b2a : memory::format_tag::BA16a16b4a),
          memory::desc({rows, out_}, bf16 ? memory::data_type::f32 : memory::data_type::s32, memory::format_tag::ab)};
}

dnnl::matmul::primitive_desc OnednnPanelsMatmul::describe(const Descs& d) const {
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(d.src, d.weights, d.dst), engine_);
}

std::unique_ptr<OnednnPanelsMatmul> OnednnPanelsMatmul::make(PanelsLayout layout, const void* panels,
                                                             size_t panel_bytes, int64_t in_features,
                                                             int64_t out_features, int64_t max_rows, int num_threads,
                                                             std::string& why, bool accept_reference) {
  // oneDNN pads a blocked dimension to the product of its blocks: K to 32
  // (16 x 2) or 64 (16 x 4); the panels pad it to 2 or 4.
  const int64_t k_block = layout == PanelsLayout::bf16_pairs ? 32 : 64;
  if (in_features % k_block != 0) {
    why = "in_features " + std::to_string(in_features) + " is not a multiple of " + std::to_string(k_block);
    return nullptr;
  }
  std::unique_ptr<OnednnPanelsMatmul> m(new OnednnPanelsMatmul());
  m->layout_ = layout;
  m->in_ = in_features;
  m->out_ = out_features;
  m->threads_ = std::max(1, num_threads);
  m->panels_ = const_cast<void*>(panels);
  try {
    m->engine_ = dnnl::engine(dnnl::engine::kind::cpu, 0);
    m->stream_ = dnnl::stream(m->engine_);
    const OmpTeam team(m->threads_);
    const dnnl::matmul::primitive_desc pd = m->describe(m->descs(padded_rows(std::min<int64_t>(max_rows, kFineRows))));
    m->implementation_ = pd.impl_info_str();
    if (pd.weights_desc().get_size() != panel_bytes) {
      why = "oneDNN's layout takes " + std::to_string(pd.weights_desc().get_size()) + " bytes, the panels " +
            std::to_string(panel_bytes);
      return nullptr;
    }
  } catch (const dnnl::error& e) {
    why = std::string("oneDNN has no such matmul on this CPU (") + e.what() + ")";
    return nullptr;
  }
  if (!accept_reference && m->implementation_.rfind("brg", 0) != 0) {  // only the reference code would run it
    why = "oneDNN offers only '" + m->implementation_ + "' for it on this CPU";
    return nullptr;
  }
  m->num_slots_ = static_cast<size_t>(bucket_index(padded_rows(std::max<int64_t>(max_rows, 1))) + 1);
  m->slots_ = std::make_unique<Slot[]>(m->num_slots_);
  return m;
}

OnednnPanelsMatmul::Slot& OnednnPanelsMatmul::slot_for(int64_t padded) {
  const auto i = static_cast<size_t>(bucket_index(padded));
  if (i >= num_slots_) throw std::out_of_range("more rows than the matmul was made for");
  Slot& slot = slots_[i];
  std::call_once(slot.made, [&] {
    // The primitive and its arguments, made once: a forward only points the
    // activations and results at its workspace (no allocation per call).
    const Descs d = descs(padded);
    slot.matmul = std::make_unique<dnnl::matmul>(describe(d));
    slot.args = {{DNNL_ARG_SRC, memory(d.src, engine_, DNNL_MEMORY_NONE)},
                 {DNNL_ARG_WEIGHTS, memory(d.weights, engine_, panels_)},
                 {DNNL_ARG_DST, memory(d.dst, engine_, DNNL_MEMORY_NONE)}};
  });
  return slot;
}

void OnednnPanelsMatmul::multiply(const void* src, int64_t rows, void* dst) {
  const OmpTeam team(threads_);
  Slot& slot = slot_for(padded_rows(rows));
  slot.args.at(DNNL_ARG_SRC).set_data_handle(const_cast<void*>(src));
  slot.args.at(DNNL_ARG_DST).set_data_handle(dst);
  slot.matmul->execute(stream_, slot.args);
  stream_.wait();
}

}  // namespace llmk::cpu_common
