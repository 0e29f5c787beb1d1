// 64-byte aligned host memory (the KV cache's buffers) and the scratch that
// linear layers share, on the host or a device.
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
  // The same from stream memory (kernels/cpu/stream_memory.hpp: huge pages
  // where the system offers them), for what every step reads through: the
  // KV cache.
  static AlignedBuffer streamed(size_t bytes, const char* what);
  AlignedBuffer(AlignedBuffer&& o) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  ~AlignedBuffer();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  bool streamed_ = false;
};

// The scratch of linear layers (llmk_linear_api::workspace_bytes). Every
// layer of a model shares one: it is sized while the layers are created, for
// the largest forward any of them will run, and one forward at a time uses it.
// It lives where the layers' activations live: host memory by default, or
// the memory a device executor's allocator gives (cudaMalloc for CUDA).
class LinearWorkspace {
 public:
  // Returns at least `bytes` bytes, 64-byte aligned, or throws Error.
  using Allocate = void* (*)(size_t bytes);
  using Release = void (*)(void* data) noexcept;

  LinearWorkspace() = default;  // host memory
  LinearWorkspace(Allocate allocate, Release release) : allocate_(allocate), release_(release) {}
  ~LinearWorkspace() { reset(); }
  LinearWorkspace(const LinearWorkspace&) = delete;
  LinearWorkspace& operator=(const LinearWorkspace&) = delete;

  void require(size_t bytes) {
    if (bytes <= bytes_) return;
    if (allocate_ == nullptr) {
      host_ = AlignedBuffer(bytes, "linear layers' workspace");
      data_ = host_.data();
    } else {
      reset();
      data_ = allocate_(bytes);
    }
    bytes_ = bytes;
  }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void reset() {
    if (release_ != nullptr && data_ != nullptr) release_(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

  Allocate allocate_ = nullptr;
  Release release_ = nullptr;
  AlignedBuffer host_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace llmk
