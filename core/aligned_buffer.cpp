#include "core/aligned_buffer.hpp"

#include <cstdlib>
#include <string>
#include <utility>

#include "core/error.hpp"

namespace llmk {

AlignedBuffer::AlignedBuffer(size_t n, const char* what) : bytes_(n) {
  if (n == 0) return;
  data_ = std::aligned_alloc(64, (n + 63) / 64 * 64);
  if (data_ == nullptr)
    throw Error(ErrorCode::internal, "cannot allocate " + std::to_string(n) + " bytes for " + what);
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_) {
  o.data_ = nullptr;
  o.bytes_ = 0;
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

}  // namespace llmk
