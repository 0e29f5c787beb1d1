#include "core/aligned_buffer.hpp"

#include <cstdlib>
#include <new>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "kernels/cpu/stream_memory.hpp"

namespace llmk {

AlignedBuffer::AlignedBuffer(size_t n, const char* what) : bytes_(n) {
  if (n == 0) return;
  data_ = std::aligned_alloc(64, (n + 63) / 64 * 64);
  if (data_ == nullptr)
    throw Error(ErrorCode::internal, "cannot allocate " + std::to_string(n) + " bytes for " + what);
}

AlignedBuffer AlignedBuffer::streamed(size_t n, const char* what) {
  AlignedBuffer b;
  if (n == 0) return b;
  try {
    b.data_ = kernels::cpu::stream_alloc(n);
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::internal, "cannot allocate " + std::to_string(n) + " bytes for " + what);
  }
  b.bytes_ = n;
  b.streamed_ = true;
  return b;
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_), streamed_(o.streamed_) {
  o.data_ = nullptr;
  o.bytes_ = 0;
  o.streamed_ = false;
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(bytes_, o.bytes_);
  std::swap(streamed_, o.streamed_);
  return *this;
}

AlignedBuffer::~AlignedBuffer() {
  if (streamed_)
    kernels::cpu::stream_free(data_);
  else
    std::free(data_);
}

}  // namespace llmk
