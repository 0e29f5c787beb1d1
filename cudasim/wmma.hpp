// cudasim's WMMA subset (nvcuda::wmma), 16x16x16 tiles with __half or
// __nv_bfloat16 inputs and float accumulators.
//
// Fragment layout is NOT simulated: every lane's fragment holds the whole tile
// (row-major, logical coordinates), num_elements is the tile size, and
// element-wise loops over x[i] touch all of it. Code that assumes which lane
// owns which element (or indexes x[] by position) is not checked by this.
// Loads and mma_sync are computed by every lane; store_matrix_sync is done by
// the warp's first lane between two warp barriers, as the warp's one store.
// For the race check, a load reads element i of the tile as lane i % 32 (a
// GPU's lanes, too, split a tile's elements between them; the real split
// differs), so each element is tracked once per warp, not once per lane.
// Loads and stores check the API's pointer alignment and ldm rules.
#pragma once

#include <cstdint>
#include <cstdio>

#if defined(__SANITIZE_THREAD__)
// The race check's hook (sim/race.cpp), called by the instrumented code.
extern "C" void __tsan_read_range(void* address, unsigned long size);
#endif

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
template <class Use, int M, int N, int K>
struct tile_shape;
template <int M, int N, int K>
struct tile_shape<matrix_a, M, N, K> {
  static constexpr int rows = M, cols = K;
};
template <int M, int N, int K>
struct tile_shape<matrix_b, M, N, K> {
  static constexpr int rows = K, cols = N;
};
template <int M, int N, int K>
struct tile_shape<accumulator, M, N, K> {
  static constexpr int rows = M, cols = N;
};
}  // namespace detail

template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment {
  static_assert(M == 16 && N == 16 && K == 16, "cudasim's WMMA supports 16x16x16 tiles only");

 public:
  static constexpr int rows = detail::tile_shape<Use, M, N, K>::rows;
  static constexpr int cols = detail::tile_shape<Use, M, N, K>::cols;
  static constexpr int num_elements = rows * cols;
  T x[num_elements];  // [rows, cols] row-major, the whole tile
};

template <class Use, int M, int N, int K, class T, class Layout, class V>
inline void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, const V& value) {
  __syncwarp();
  for (int i = 0; i < f.num_elements; ++i) f.x[i] = static_cast<T>(value);
}

namespace detail {
// The API's rules for load_matrix_sync / store_matrix_sync: the pointer
// 256-bit (32-byte) aligned, ldm a multiple of 16 bytes (8 __half or
// __nv_bfloat16 elements, 4 floats). A GPU's behaviour otherwise is undefined;
// here the launch fails naming the call, the pointer and ldm.
template <class T>
inline void check_tile_pointer(const char* call, const T* p, unsigned ldm) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  if (address % 32 != 0 || ldm * sizeof(T) % 16 != 0) {
    char text[200];
    std::snprintf(text, sizeof text,
                  "wmma::%s: pointer %p (%s) and ldm %u (%zu bytes%s): the pointer must be 32-byte aligned and ldm a "
                  "multiple of 16 bytes",
                  call, static_cast<const void*>(p), address % 32 != 0 ? "not 32-byte aligned" : "aligned", ldm,
                  ldm * sizeof(T), ldm * sizeof(T) % 16 != 0 ? ", not a multiple of 16" : "");
    ::cudasim::detail::kernel_fail(text);
  }
}

// Element i of a tile being loaded, read by this lane: tracked by the race
// check when i % 32 is this lane (see the top of this file).
template <class T>
__attribute__((no_sanitize("thread"))) inline T load_element(const T* p, int i, unsigned lane) {
#if defined(__SANITIZE_THREAD__)
  if (static_cast<unsigned>(i % 32) == lane) __tsan_read_range(const_cast<T*>(p), sizeof(T));
#else
  (void)i, (void)lane;
#endif
  return *p;
}
}  // namespace detail

// A / B fragments: the layout is part of the type. ldm in elements.
template <class Use, int M, int N, int K, class T, class Layout>
__attribute__((no_sanitize("thread"))) inline void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f,
                                                                    const T* p, unsigned ldm) {
  static_assert(std::is_same_v<Layout, row_major> || std::is_same_v<Layout, col_major>,
                "matrix_a / matrix_b fragments name their layout");
  detail::check_tile_pointer("load_matrix_sync", p, ldm);
  __syncwarp();
  using frag = fragment<Use, M, N, K, T, Layout>;
  const unsigned lane = ::cudasim::detail::lane_id();
  for (int r = 0; r < frag::rows; ++r)
    for (int c = 0; c < frag::cols; ++c)
      f.x[r * frag::cols + c] = detail::load_element(
          std::is_same_v<Layout, row_major> ? &p[r * ldm + c] : &p[c * ldm + r], r * frag::cols + c, lane);
  __syncwarp();
}

// Accumulator fragments: the layout is an argument.
template <int M, int N, int K, class T>
__attribute__((no_sanitize("thread"))) inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f,
                                                                    const T* p, unsigned ldm, layout_t layout) {
  detail::check_tile_pointer("load_matrix_sync", p, ldm);
  __syncwarp();
  const unsigned lane = ::cudasim::detail::lane_id();
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      f.x[r * N + c] =
          detail::load_element(layout == mem_row_major ? &p[r * ldm + c] : &p[c * ldm + r], r * N + c, lane);
  __syncwarp();
}

template <int M, int N, int K, class T>
inline void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout) {
  detail::check_tile_pointer("store_matrix_sync", p, ldm);
  __syncwarp();
  if (::cudasim::detail::lane_id() == 0) {
    for (int r = 0; r < M; ++r)
      for (int c = 0; c < N; ++c) (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[r * N + c];
  }
  __syncwarp();
}

// d = a * b + c, products and sums in float (the tensor cores' accumulation).
// Fragments are registers on a GPU, never shared memory: the product is left
// out of the race instrumentation (which would otherwise see every one of its
// fragment accesses), and each input is converted to float once.
template <int M, int N, int K, class TA, class LA, class TB, class LB, class TC>
__attribute__((no_sanitize("thread"))) inline void mma_sync(fragment<accumulator, M, N, K, TC>& d,
                                                            const fragment<matrix_a, M, N, K, TA, LA>& a,
                                                            const fragment<matrix_b, M, N, K, TB, LB>& b,
                                                            const fragment<accumulator, M, N, K, TC>& c,
                                                            bool satf = false) {
  __syncwarp();
  float a_f[M * K], b_f[K * N];
  for (int i = 0; i < M * K; ++i) a_f[i] = static_cast<float>(a.x[i]);
  for (int i = 0; i < K * N; ++i) b_f[i] = static_cast<float>(b.x[i]);
  TC out[M * N];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float acc = static_cast<float>(c.x[i * N + j]);
      for (int k = 0; k < K; ++k) acc += a_f[i * K + k] * b_f[k * N + j];
      if (satf) acc = acc < 0.0f ? 0.0f : (acc > 1.0f ? 1.0f : acc);
      out[i * N + j] = static_cast<TC>(acc);
    }
  for (int i = 0; i < M * N; ++i) d.x[i] = out[i];
  __syncwarp();
}

}  // namespace nvcuda::wmma
