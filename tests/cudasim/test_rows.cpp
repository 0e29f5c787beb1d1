// The row-move kernels of the CUDA forward against plain host loops.
#include <cstdint>
#include <vector>

#include "kernels/cuda/rows.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;

TEST_CASE("copy_rows, add_bias_rows and gather_rows move exactly the named elements", "[rows]") {
  for (const std::uint64_t seed : seeds) {
    reset_simulator(seed);
    const int rows = 7, cols = 45, src_stride = 61, dst_stride = 50;
    const std::vector<float> src = random_floats(static_cast<size_t>(rows) * src_stride, seed);
    const std::vector<float> bias = random_floats(cols, seed + 1);
    std::vector<float> dst_init = random_floats(static_cast<size_t>(rows) * dst_stride, seed + 2);
    device_buffer<float> d_src(src), d_bias(bias), d_dst(dst_init);

    CUDA_REQUIRE(llmk::cuda::copy_rows(d_src.get(), src_stride, d_dst.get(), dst_stride, rows, cols, nullptr));
    CUDA_REQUIRE(llmk::cuda::add_bias_rows(d_dst.get(), dst_stride, d_bias.get(), rows, cols, nullptr));
    const std::vector<float> got = d_dst.download();
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < dst_stride; ++c) {
        const float want = c < cols ? src[r * src_stride + c] + bias[c] : dst_init[r * dst_stride + c];
        REQUIRE(got[r * dst_stride + c] == want);  // one float add: exact
      }

    // Gather rows 4, 0, 4 (a row may repeat) of a contiguous [rows, cols].
    const std::vector<int32_t> pick{4, 0, 4};
    const std::vector<float> packed = random_floats(static_cast<size_t>(rows) * cols, seed + 3);
    device_buffer<float> d_packed(packed), d_out(pick.size() * cols);
    device_buffer<int32_t> d_pick(pick);
    CUDA_REQUIRE(llmk::cuda::gather_rows(d_packed.get(), d_pick.get(), d_out.get(), 3, cols, nullptr));
    const std::vector<float> out = d_out.download();
    for (size_t i = 0; i < pick.size(); ++i)
      for (int c = 0; c < cols; ++c) REQUIRE(out[i * cols + c] == packed[pick[i] * cols + c]);
  }
}
