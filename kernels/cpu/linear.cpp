#include "kernels/cpu/linear.hpp"

namespace llmk::kernels::cpu {

namespace {

template <class T>
void pack_panels_of(const T* w, int64_t out_features, int64_t in_features, int64_t width, T* packed) {
  const int64_t panels = (out_features + width - 1) / width;
#pragma omp parallel for
  for (int64_t p = 0; p < panels; ++p) {
    T* dst = packed + p * width * in_features;
    for (int64_t j = 0; j < width; ++j) {
      const int64_t n = p * width + j;
      if (n >= out_features) {
        for (int64_t k = 0; k < in_features; ++k) dst[k * width + j] = 0;
        continue;
      }
      const T* src = w + n * in_features;
      for (int64_t k = 0; k < in_features; ++k) dst[k * width + j] = src[k];
    }
  }
}

}  // namespace

void pack_panels(const float* w, int64_t out_features, int64_t in_features, int64_t width, float* packed) {
  pack_panels_of(w, out_features, in_features, width, packed);
}

void pack_panels(const uint16_t* w, int64_t out_features, int64_t in_features, int64_t width, uint16_t* packed) {
  pack_panels_of(w, out_features, in_features, width, packed);
}

}  // namespace llmk::kernels::cpu
