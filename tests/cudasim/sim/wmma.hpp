// cudasim's WMMA subset (nvcuda::wmma), 16x16x16 tiles with __half or
// __nv_bfloat16 inputs and float accumulators.
//
// Fragment layout is NOT simulated: every lane's fragment holds the whole tile
// (row-major, logical coordinates), num_elements is the tile size, and
// element-wise loops over x[i] touch all of it. Code that assumes which lane
// owns which element (or indexes x[] by position) is not checked by this.
// Loads and mma_sync are computed by every lane; store_matrix_sync is done by
// the warp's first lane between two warp barriers, as the warp's one store.
#pragma once

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

// A / B fragments: the layout is part of the type. ldm in elements.
template <class Use, int M, int N, int K, class T, class Layout>
inline void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const T* p, unsigned ldm) {
  static_assert(std::is_same_v<Layout, row_major> || std::is_same_v<Layout, col_major>,
                "matrix_a / matrix_b fragments name their layout");
  __syncwarp();
  using frag = fragment<Use, M, N, K, T, Layout>;
  for (int r = 0; r < frag::rows; ++r)
    for (int c = 0; c < frag::cols; ++c)
      f.x[r * frag::cols + c] = std::is_same_v<Layout, row_major> ? p[r * ldm + c] : p[c * ldm + r];
  __syncwarp();
}

// Accumulator fragments: the layout is an argument.
template <int M, int N, int K, class T>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const T* p, unsigned ldm, layout_t layout) {
  __syncwarp();
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c) f.x[r * N + c] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
  __syncwarp();
}

template <int M, int N, int K, class T>
inline void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout) {
  __syncwarp();
  if (::cudasim::detail::lane_id() == 0) {
    for (int r = 0; r < M; ++r)
      for (int c = 0; c < N; ++c) (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[r * N + c];
  }
  __syncwarp();
}

// d = a * b + c, products and sums in float (the tensor cores' accumulation).
template <int M, int N, int K, class TA, class LA, class TB, class LB, class TC>
inline void mma_sync(fragment<accumulator, M, N, K, TC>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
                     const fragment<matrix_b, M, N, K, TB, LB>& b, const fragment<accumulator, M, N, K, TC>& c,
                     bool satf = false) {
  __syncwarp();
  TC out[M * N];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float acc = static_cast<float>(c.x[i * N + j]);
      for (int k = 0; k < K; ++k) acc += static_cast<float>(a.x[i * K + k]) * static_cast<float>(b.x[k * N + j]);
      if (satf) acc = acc < 0.0f ? 0.0f : (acc > 1.0f ? 1.0f : acc);
      out[i * N + j] = static_cast<TC>(acc);
    }
  for (int i = 0; i < M * N; ++i) d.x[i] = out[i];
  __syncwarp();
}

}  // namespace nvcuda::wmma
