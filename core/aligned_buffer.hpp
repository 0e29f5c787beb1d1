// 64-byte aligned host memory: the KV cache's buffers and the scratch that
// linear layers share.
#pragma once

#include <cstddef>

namespace llmk {

// Uninitialized storage: KV caches are large and written before they are
// read, so pages are committed on first touch only.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Throws Error(internal) naming `what` when the allocation fails.
  explicit AlignedBuffer(size_t bytes, const char* what = "a buffer");
  AlignedBuffer(AlignedBuffer&& o) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  ~AlignedBuffer();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// The scratch of linear layers (llmk_linear_api::workspace_bytes). Every
// layer of a model shares one: it is sized while the layers are created, for
// the largest forward any of them will run, and one forward at a time uses it.
class LinearWorkspace {
 public:
  void require(size_t bytes) {
    if (bytes > buffer_.bytes()) buffer_ = AlignedBuffer(bytes, "linear layers' workspace");
  }
  void* data() const { return buffer_.data(); }
  size_t bytes() const { return buffer_.bytes(); }

 private:
  AlignedBuffer buffer_;
};

}  // namespace llmk
