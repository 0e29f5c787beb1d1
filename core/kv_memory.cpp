#include "core/kv_memory.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "core/error.hpp"

namespace llmk {

namespace {

// Writes every page of the buffer (from all threads: the kernel clears pages
// at about the speed of one core each).
void prefault(AlignedBuffer& buf, uint32_t num_threads) {
  if (buf.data() == nullptr) return;
  constexpr size_t kChunk = size_t{1} << 21;
  const auto chunks = static_cast<int64_t>((buf.bytes() + kChunk - 1) / kChunk);
#pragma omp parallel for num_threads(static_cast<int>(num_threads))
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t at = static_cast<size_t>(c) * kChunk;
    std::memset(static_cast<uint8_t*>(buf.data()) + at, 0, std::min(kChunk, buf.bytes() - at));
  }
}

}  // namespace

KvMemory::KvMemory(int32_t num_layers, const ModelRuntime& rt, const llmk_kv_layout& layout)
    : num_slots_(rt.num_kv_slots) {
  if (layout.alignment > 64)
    throw Error(ErrorCode::plugin, "the attention plugin's KV layout asks for " + std::to_string(layout.alignment) +
                                       "-byte alignment; the CPU cache gives 64");
  const size_t rows = num_slots_;
  layers_.resize(static_cast<size_t>(num_layers));
  for (Layer& l : layers_) {
    l.k = AlignedBuffer::streamed(rows * layout.k_bytes_per_slot, "the KV cache");
    l.v = AlignedBuffer::streamed(rows * layout.v_bytes_per_slot, "the KV cache");
    if (layout.k_scale_bytes_per_slot != 0)
      l.k_scale = AlignedBuffer::streamed(rows * layout.k_scale_bytes_per_slot, "the KV cache scales");
    if (layout.v_scale_bytes_per_slot != 0)
      l.v_scale = AlignedBuffer::streamed(rows * layout.v_scale_bytes_per_slot, "the KV cache scales");
    if (rt.prefault_kv)
      for (AlignedBuffer* buf : {&l.k, &l.v, &l.k_scale, &l.v_scale}) prefault(*buf, rt.num_threads);
  }
}

llmk_kv_layer KvMemory::layer(int32_t i) {
  Layer& l = layers_[static_cast<size_t>(i)];
  return {l.k.data(), l.v.data(), static_cast<float*>(l.k_scale.data()), static_cast<float*>(l.v_scale.data()),
          num_slots_};
}

size_t KvMemory::bytes() const {
  size_t total = 0;
  for (const Layer& l : layers_) total += l.k.bytes() + l.v.bytes() + l.k_scale.bytes() + l.v_scale.bytes();
  return total;
}

void KvMemory::apply_copies(const std::vector<llmk_kv_copy>& copies) {
  for (const llmk_kv_copy& c : copies) {
    if (c.src_slot < 0 || c.dst_slot < 0 || c.num_slots < 0 ||
        static_cast<int64_t>(std::max(c.src_slot, c.dst_slot)) + c.num_slots > num_slots_)
      throw Error(ErrorCode::invalid_argument, "kv copy outside the cache");
    for (Layer& l : layers_) {
      for (AlignedBuffer* buf : {&l.k, &l.v, &l.k_scale, &l.v_scale}) {
        if (buf->data() == nullptr) continue;
        const size_t row = buf->bytes() / num_slots_;
        auto* base = static_cast<uint8_t*>(buf->data());
        std::memmove(base + c.dst_slot * row, base + c.src_slot * row, static_cast<size_t>(c.num_slots) * row);
      }
    }
  }
}

size_t KvMemory::saved_bytes_per_slot() const {
  if (layers_.empty() || num_slots_ == 0) return 0;
  const Layer& l = layers_.front();
  return layers_.size() * (l.k.bytes() + l.v.bytes() + l.k_scale.bytes() + l.v_scale.bytes()) / num_slots_;
}

std::vector<uint8_t> KvMemory::save(const std::vector<int32_t>& slots) const {
  std::vector<uint8_t> out(slots.size() * saved_bytes_per_slot());
  uint8_t* dst = out.data();
  for (const Layer& l : layers_)
    for (int32_t s : slots) {
      if (s < 0 || static_cast<uint32_t>(s) >= num_slots_)
        throw Error(ErrorCode::invalid_argument, "save_kv: slot " + std::to_string(s) + " outside the cache");
      for (const AlignedBuffer* buf : {&l.k, &l.v, &l.k_scale, &l.v_scale}) {
        if (buf->data() == nullptr) continue;
        const size_t r = buf->bytes() / num_slots_;
        std::memcpy(dst, static_cast<const uint8_t*>(buf->data()) + static_cast<size_t>(s) * r, r);
        dst += r;
      }
    }
  return out;
}

void KvMemory::restore(const std::vector<int32_t>& slots, const std::vector<uint8_t>& data) {
  if (data.size() != slots.size() * saved_bytes_per_slot())
    throw Error(ErrorCode::invalid_argument, "restore_kv: " + std::to_string(data.size()) + " bytes do not hold " +
                                                 std::to_string(slots.size()) + " slots");
  const uint8_t* src = data.data();
  for (Layer& l : layers_)
    for (int32_t s : slots) {
      if (s < 0 || static_cast<uint32_t>(s) >= num_slots_)
        throw Error(ErrorCode::invalid_argument, "restore_kv: slot " + std::to_string(s) + " outside the cache");
      for (AlignedBuffer* buf : {&l.k, &l.v, &l.k_scale, &l.v_scale}) {
        if (buf->data() == nullptr) continue;
        const size_t r = buf->bytes() / num_slots_;
        std::memcpy(static_cast<uint8_t*>(buf->data()) + static_cast<size_t>(s) * r, src, r);
        src += r;
      }
    }
}

}  // namespace llmk
