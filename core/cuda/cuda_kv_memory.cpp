#include "core/cuda/cuda_kv_memory.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"

namespace llmk {

namespace {

// memmove within one device array: a copy whose ranges overlap goes in
// pieces no longer than the distance, in the order that reads every byte
// before it is overwritten.
void device_move(unsigned char* base, size_t dst, size_t src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0 || dst == src) return;
  const size_t distance = dst > src ? dst - src : src - dst;
  if (distance >= bytes) {
    check_cuda(cudaMemcpyAsync(base + dst, base + src, bytes, cudaMemcpyDeviceToDevice, stream), "a KV slot copy");
    return;
  }
  if (dst < src) {
    for (size_t done = 0; done < bytes; done += distance)
      check_cuda(cudaMemcpyAsync(base + dst + done, base + src + done, std::min(distance, bytes - done),
                                 cudaMemcpyDeviceToDevice, stream),
                 "a KV slot copy");
  } else {
    for (size_t left = bytes; left > 0;) {
      const size_t piece = std::min(distance, left);
      left -= piece;
      check_cuda(cudaMemcpyAsync(base + dst + left, base + src + left, piece, cudaMemcpyDeviceToDevice, stream),
                 "a KV slot copy");
    }
  }
}

}  // namespace

uint64_t kv_bytes_per_token(const llmk_kv_layout& layout, int32_t num_layers) {
  return static_cast<uint64_t>(num_layers) * (layout.k_bytes_per_slot + layout.v_bytes_per_slot +
                                              layout.k_scale_bytes_per_slot + layout.v_scale_bytes_per_slot);
}

CudaKvMemory::CudaKvMemory(int32_t num_layers, uint32_t num_slots, const llmk_kv_layout& layout)
    : num_slots_(num_slots),
      per_slot_{layout.k_bytes_per_slot, layout.v_bytes_per_slot, layout.k_scale_bytes_per_slot,
                layout.v_scale_bytes_per_slot} {
  layers_.resize(static_cast<size_t>(num_layers));
  for (Layer& l : layers_)
    for (size_t a = 0; a < l.size(); ++a) {
      const size_t bytes = per_slot_[a] * num_slots_;
      l[a] = device_buffer(bytes, "the KV cache");
      if (bytes != 0) check_cuda(cudaMemset(l[a].data(), 0, bytes), "clearing the KV cache");
      bytes_ += bytes;
    }
}

llmk_kv_layer CudaKvMemory::layer(int32_t i) const {
  const Layer& l = layers_[static_cast<size_t>(i)];
  return {l[0].data(), l[1].data(), l[2].f32(), l[3].f32(), num_slots_};
}

size_t CudaKvMemory::saved_bytes_per_slot() const {
  size_t per_slot = 0;
  for (uint64_t b : per_slot_) per_slot += b;
  return per_slot * layers_.size();
}

void CudaKvMemory::check_slots(const std::vector<int32_t>& slots, const char* what) const {
  for (int32_t s : slots)
    if (s < 0 || static_cast<uint32_t>(s) >= num_slots_)
      throw Error(ErrorCode::invalid_argument, std::string(what) + ": slot " + std::to_string(s) +
                                                   " outside the cache");
}

void CudaKvMemory::apply_copies(const std::vector<llmk_kv_copy>& copies, cudaStream_t stream) {
  for (const llmk_kv_copy& c : copies) {
    if (c.src_slot < 0 || c.dst_slot < 0 || c.num_slots < 0 ||
        static_cast<int64_t>(std::max(c.src_slot, c.dst_slot)) + c.num_slots > num_slots_)
      throw Error(ErrorCode::invalid_argument, "kv copy outside the cache");
    for (Layer& l : layers_)
      for (size_t a = 0; a < l.size(); ++a) {
        const size_t per_slot = per_slot_[a];
        if (per_slot == 0) continue;
        device_move(l[a].as<unsigned char>(), c.dst_slot * per_slot, c.src_slot * per_slot,
                    c.num_slots * per_slot, stream);
      }
  }
}

std::vector<uint8_t> CudaKvMemory::save(const std::vector<int32_t>& slots, cudaStream_t stream) {
  check_slots(slots, "save_kv");
  check_cuda(cudaStreamSynchronize(stream), "finishing the step before a KV save");
  std::vector<uint8_t> out(slots.size() * saved_bytes_per_slot());
  uint8_t* dst = out.data();
  for (const Layer& l : layers_)
    for (int32_t s : slots)
      for (size_t a = 0; a < l.size(); ++a) {
        const size_t per_slot = per_slot_[a];
        if (per_slot == 0) continue;
        check_cuda(cudaMemcpy(dst, l[a].as<uint8_t>() + static_cast<size_t>(s) * per_slot, per_slot,
                              cudaMemcpyDeviceToHost),
                   "saving KV slots");
        dst += per_slot;
      }
  return out;
}

void CudaKvMemory::restore(const std::vector<int32_t>& slots, const std::vector<uint8_t>& data, cudaStream_t stream) {
  check_slots(slots, "restore_kv");
  if (data.size() != slots.size() * saved_bytes_per_slot())
    throw Error(ErrorCode::invalid_argument, "restore_kv: " + std::to_string(data.size()) +
                                                 " bytes do not hold " + std::to_string(slots.size()) + " slots");
  check_cuda(cudaStreamSynchronize(stream), "finishing the step before a KV restore");
  const uint8_t* src = data.data();
  for (Layer& l : layers_)
    for (int32_t s : slots)
      for (size_t a = 0; a < l.size(); ++a) {
        const size_t per_slot = per_slot_[a];
        if (per_slot == 0) continue;
        check_cuda(cudaMemcpy(l[a].as<uint8_t>() + static_cast<size_t>(s) * per_slot, src, per_slot,
                              cudaMemcpyHostToDevice),
                   "restoring KV slots");
        src += per_slot;
      }
}

}  // namespace llmk
