// The bounds check on global memory: an access a simulated kernel makes
// inside the device's address range must lie inside one live allocation,
// else the launch fails with cudaErrorIllegalAddress and a message naming
// the kernel, the thread, the address and the allocation. (On a GPU such an
// access is an illegal address only when it leaves the mapped pages, and
// then it poisons the context: nothing here runs natively.)
#include <string>

#include "test_kernels.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;

#if !LLMK_CUDA_NATIVE

namespace {

// Runs gather over `index` (one thread each) reading `in` into a fresh output;
// returns the launch's status after a synchronisation.
cudaError_t run_gather(const float* in, const std::vector<int>& index, float* out) {
  device_buffer<int> d_index(index);
  gather(in, d_index.get(), out, static_cast<int>(index.size()), nullptr);
  return cudaDeviceSynchronize();
}

}  // namespace

TEST_CASE("Global accesses inside their allocations pass the bounds check and move the right values") {
  reset_simulator(1);
  const auto x = random_floats(37, 3);
  device_buffer<float> in(x), out(37);
  std::vector<int> index(37);
  for (int i = 0; i < 37; ++i) index[i] = 36 - i;  // the last element of `in` included
  CUDA_REQUIRE(run_gather(in.get(), index, out.get()));
  const auto got = out.download();
  for (int i = 0; i < 37; ++i) REQUIRE(got[i] == x[36 - i]);
}

TEST_CASE("A read one element past its allocation fails the launch naming kernel, thread, address and allocation") {
  reset_simulator(1);
  device_buffer<float> in(random_floats(37, 3)), out(2);
  REQUIRE(run_gather(in.get(), {0, 37}, out.get()) == cudaErrorIllegalAddress);
  const std::string detail = cudasim::last_error_detail();
  INFO(detail);
  REQUIRE(detail.find("out-of-bounds global read in kernel 'gather_kernel'") != std::string::npos);
  REQUIRE(detail.find("thread 1 (1,0,0)") != std::string::npos);
  REQUIRE(detail.find("4 bytes at 0x") != std::string::npos);
  REQUIRE(detail.find("0 bytes past the end of the 148-byte allocation at 0x") != std::string::npos);
  // The next launch starts clean once the error is read.
  REQUIRE(cudaGetLastError() == cudaErrorIllegalAddress);
  CUDA_REQUIRE(run_gather(in.get(), {0, 36}, out.get()));
}

TEST_CASE("A write past the end of its output fails the launch as a write, one report per launch") {
  reset_simulator(1);
  device_buffer<float> in(random_floats(8, 3)), out(5);
  // Eight threads write an output of five: threads 5, 6 and 7 are out of bounds.
  REQUIRE(run_gather(in.get(), {0, 1, 2, 3, 4, 5, 6, 7}, out.get()) == cudaErrorIllegalAddress);
  const std::string detail = cudasim::last_error_detail();
  INFO(detail);
  REQUIRE(detail.rfind("3 out-of-bounds global access(es); first: out-of-bounds global write in kernel 'gather_kernel'", 0) == 0);
  REQUIRE(detail.find("bytes past the end of the 20-byte allocation") != std::string::npos);
  (void)cudaGetLastError();
}

TEST_CASE("An access that starts inside an allocation and runs past its end is out of bounds") {
  reset_simulator(1);
  device_buffer<float> in(random_floats(4, 3)), out(1);
  // A float read at byte 14 of a 16-byte buffer: starts inside, ends 2 bytes past.
  const float* misaligned = reinterpret_cast<const float*>(reinterpret_cast<const char*>(in.get()) + 14);
  REQUIRE(run_gather(misaligned, {0}, out.get()) == cudaErrorIllegalAddress);
  const std::string detail = cudasim::last_error_detail();
  INFO(detail);
  REQUIRE(detail.find("offset 14 of the 16-byte allocation at 0x") != std::string::npos);
  REQUIRE(detail.find("running 2 bytes past its end") != std::string::npos);
  (void)cudaGetLastError();
}

TEST_CASE("A read of freed device memory is outside any device allocation") {
  reset_simulator(1);
  device_buffer<float> out(1);
  float* freed = nullptr;
  CUDA_REQUIRE(cudaMalloc(reinterpret_cast<void**>(&freed), 64 * sizeof(float)));
  CUDA_REQUIRE(cudaFree(freed));
  REQUIRE(run_gather(freed, {3}, out.get()) == cudaErrorIllegalAddress);
  const std::string detail = cudasim::last_error_detail();
  INFO(detail);
  REQUIRE(detail.find("out-of-bounds global read in kernel 'gather_kernel' block (0,0,0) thread 0 (0,0,0)") !=
          std::string::npos);
  REQUIRE(detail.find("outside any device allocation") != std::string::npos);
  (void)cudaGetLastError();
}

TEST_CASE("Host and stack memory a kernel touches are not device memory and are not bounds-checked") {
  reset_simulator(1);
  // The kernel's own arguments and locals live on its fiber's stack; the
  // index buffer below is device memory. Pinned host memory is outside the
  // device's range, as mapped host memory is on a GPU.
  float* pinned = nullptr;
  CUDA_REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pinned), 4 * sizeof(float)));
  for (int i = 0; i < 4; ++i) pinned[i] = static_cast<float>(i) + 0.5f;
  device_buffer<float> out(4);
  CUDA_REQUIRE(run_gather(pinned, {3, 2, 1, 0}, out.get()));
  REQUIRE(out.download() == std::vector<float>{3.5f, 2.5f, 1.5f, 0.5f});
  CUDA_REQUIRE(cudaFreeHost(pinned));
}

TEST_CASE("An atomic past the end of its allocation fails the launch as an out-of-bounds atomic") {
  reset_simulator(1);
  // Four bins counted into three: the histogram's global atomicAdd of bin 3
  // lands one element past the counts.
  device_buffer<int> values(std::vector<int>{0, 3, 3, 1});
  device_buffer<unsigned> counts(std::vector<unsigned>(3, 0u));
  histogram(values.get(), counts.get(), 4, 4, nullptr);
  REQUIRE(cudaDeviceSynchronize() == cudaErrorIllegalAddress);
  const std::string detail = cudasim::last_error_detail();
  INFO(detail);
  REQUIRE(detail.find("out-of-bounds global atomic in kernel 'histogram_kernel' block (0,0,0)") != std::string::npos);
  REQUIRE(detail.find("4 bytes at 0x") != std::string::npos);
  REQUIRE(detail.find("0 bytes past the end of the 12-byte allocation at 0x") != std::string::npos);
  (void)cudaGetLastError();
  // With four counts the same launch passes and counts every value.
  device_buffer<unsigned> all_counts(std::vector<unsigned>(4, 0u));
  histogram(values.get(), all_counts.get(), 4, 4, nullptr);
  CUDA_REQUIRE(cudaDeviceSynchronize());
  REQUIRE(all_counts.download() == std::vector<unsigned>{1, 1, 0, 2});
}

#endif  // !LLMK_CUDA_NATIVE
