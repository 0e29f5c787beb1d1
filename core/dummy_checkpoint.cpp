// Deterministic random weights at real model sizes (see make_dummy_checkpoint).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sys/mman.h>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "core/checkpoint.hpp"
#include "core/error.hpp"

namespace llmk {
namespace {

namespace fs = std::filesystem;

// splitmix64's finalizer: a bijective 64-bit mix, the core of a
// counter-based generator (value = mix(key + index * odd constant)).
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// Uniform in (-bound, bound): 24 random bits centred on zero.
inline float uniform_value(uint64_t key, uint64_t index, float bound) {
  const uint64_t h = mix64(key + index * 0x9e3779b97f4a7c15ULL);
  const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  return (2.0f * u - 1.0f + 1.0f / 16777216.0f) * bound;
}

// Stores n floats as f16 (round to nearest even), 8 at a time with F16C.
void store_f16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
#endif
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

// Fills dst[0, n) with uniform(-bound, bound) values (or ones when bound is
// 0) in `dtype`, in parallel blocks: a block's values depend only on their
// indices, so any thread count gives the same bytes.
void fill_tensor(DType dtype, void* dst, int64_t n, uint64_t key, float bound) {  // dst: [n] of dtype
  constexpr int64_t kBlock = 2048;
  const int64_t num_blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < num_blocks; ++b) {
    alignas(64) float values[kBlock];
    const int64_t begin = b * kBlock;
    const int64_t count = std::min(kBlock, n - begin);
    if (bound == 0.0f) {
      for (int64_t i = 0; i < count; ++i) values[i] = 1.0f;
    } else {
      for (int64_t i = 0; i < count; ++i) values[i] = uniform_value(key, static_cast<uint64_t>(begin + i), bound);
    }
    switch (dtype) {
      case DType::f32:
        std::memcpy(static_cast<float*>(dst) + begin, values, static_cast<size_t>(count) * 4);
        break;
      case DType::f16:
        store_f16(values, static_cast<uint16_t*>(dst) + begin, count);
        break;
      default: {  // bf16
        uint16_t* out = static_cast<uint16_t*>(dst) + begin;
        for (int64_t i = 0; i < count; ++i) out[i] = f32_to_bf16(values[i]);
      }
    }
  }
}

// Anonymous memory for all dummy tensors, backed by transparent huge pages
// where the kernel allows: 2 GB of weights fault in 512x fewer pages.
class AnonymousBuffer {
 public:
  explicit AnonymousBuffer(size_t bytes) : size_(std::max<size_t>(bytes, 1)) {
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw Error(ErrorCode::internal, "dummy weights: cannot allocate " + std::to_string(bytes) + " bytes");
    data_ = static_cast<uint8_t*>(p);
  }
  ~AnonymousBuffer() { ::munmap(data_, size_); }
  AnonymousBuffer(const AnonymousBuffer&) = delete;
  AnonymousBuffer& operator=(const AnonymousBuffer&) = delete;
  uint8_t* data() const { return data_; }

 private:
  size_t size_;
  uint8_t* data_ = nullptr;
};

class DummyCheckpoint final : public Checkpoint {
 public:
  DummyCheckpoint(const ModelConfig& config, uint64_t seed, const fs::path& tokenizer_path) {
    config_ = config;
    tokenizer_path_ = tokenizer_path;
    source_ = "dummy seed=" + std::to_string(seed);
    format_ = "dummy";
    const auto shapes = expected_tensors(config);
    const size_t elem = dtype_size(config.dtype);
    size_t total = 0;
    for (const auto& [name, shape] : shapes) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      total += (static_cast<size_t>(n) * elem + 63) / 64 * 64;  // each tensor 64-byte aligned
    }
    storage_ = std::make_unique<AnonymousBuffer>(total);

    size_t offset = 0;
    for (const auto& [name, shape] : shapes) {
      TensorView v;
      v.name = name;
      v.dtype = config.dtype;
      v.shape = shape;
      v.data = storage_->data() + offset;
      const int64_t n = v.numel();
      offset += (v.nbytes() + 63) / 64 * 64;
      fill(name, shape, const_cast<void*>(v.data), n, seed);
      tensors_.emplace(name, std::move(v));
    }
  }

 private:
  void fill(const std::string& name, const std::vector<int64_t>& shape, void* dst, int64_t n, uint64_t seed) {
    // Norm weights are 1; embeddings std 0.02; [out, in] projections std
    // 1/sqrt(in); q/k/v biases (Qwen2) std 0.1, the size of the projected
    // values' spread.
    const bool is_bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    const bool is_norm = shape.size() == 1 && !is_bias;
    const bool is_embedding = name == "model.embed_tokens.weight";
    const float std_dev = is_norm        ? 0.0f
                          : is_bias      ? 0.1f
                          : is_embedding ? 0.02f
                                         : 1.0f / std::sqrt(static_cast<float>(shape[1]));
    const float bound = std_dev * std::sqrt(3.0f);  // uniform(-b, b) has std b / sqrt(3)
    const uint64_t key = mix64(mix64(seed) ^ fnv1a(name));
    fill_tensor(config_.dtype, dst, n, key, bound);
  }

  std::unique_ptr<AnonymousBuffer> storage_;  // all tensors, back to back, each 64-byte aligned
};

}  // namespace

std::unique_ptr<Checkpoint> make_dummy_checkpoint(const ModelConfig& config, uint64_t seed,
                                                  const fs::path& tokenizer_path) {
  if (config.dtype != DType::f32 && config.dtype != DType::f16 && config.dtype != DType::bf16)
    throw Error(ErrorCode::unsupported,
                std::string("dummy weights: dtype ") + dtype_name(config.dtype) + " is not supported (f32, f16, bf16)");
  return std::make_unique<DummyCheckpoint>(config, seed, tokenizer_path);
}

}  // namespace llmk
