// cuda_common/device_buffer.hpp, the buffer type of the CUDA executor, its
// sampler and the CUDA plugins: sizes, growth, uploads that read back the
// same bytes, moves that hand the memory over once, and a failed allocation
// that reports the runtime's status and leaves the buffer empty.
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "cuda_common/device_buffer.hpp"
#include "test_support.hpp"

namespace {

using llmk::cuda::DeviceBuffer;
using llmk::cuda::PinnedBuffer;

}  // namespace

TEST_CASE("A device buffer holds what it was given and grows only when asked for more") {
  DeviceBuffer empty;
  CHECK(empty.data() == nullptr);
  CHECK(empty.bytes() == 0);
  CUDA_REQUIRE(empty.allocate(0));
  CHECK(empty.data() == nullptr);

  DeviceBuffer b;
  CUDA_REQUIRE(b.allocate(1000));
  REQUIRE(b.data() != nullptr);
  CHECK(b.bytes() == 1000);
  void* first = b.data();
  CUDA_REQUIRE(b.reserve(999));  // fits: the same memory
  CHECK(b.data() == first);
  CHECK(b.bytes() == 1000);
  CUDA_REQUIRE(b.reserve(4000));
  CHECK(b.bytes() == 4000);
  b.reset();
  CHECK(b.data() == nullptr);
  CHECK(b.bytes() == 0);
}

TEST_CASE("An uploaded device buffer reads back the host bytes, and a move hands the memory over") {
  std::vector<int32_t> host(777);
  std::iota(host.begin(), host.end(), -300);
  DeviceBuffer up;
  CUDA_REQUIRE(llmk::cuda::upload(host.data(), host.size() * sizeof(int32_t), up));
  REQUIRE(up.bytes() == host.size() * sizeof(int32_t));

  DeviceBuffer moved(std::move(up));
  CHECK(up.data() == nullptr);  // the moved-from state is part of the contract
  CHECK(up.bytes() == 0);
  std::vector<int32_t> back(host.size());
  CUDA_REQUIRE(cudaMemcpy(back.data(), moved.as<int32_t>(), moved.bytes(), cudaMemcpyDeviceToHost));
  CHECK(back == host);

  PinnedBuffer pinned;
  CUDA_REQUIRE(pinned.allocate(host.size() * sizeof(int32_t)));
  CUDA_REQUIRE(cudaMemcpy(pinned.data(), moved.data(), moved.bytes(), cudaMemcpyDeviceToHost));
  CHECK(std::vector<int32_t>(pinned.as<int32_t>(), pinned.as<int32_t>() + host.size()) == host);

  DeviceBuffer empty_upload;
  CUDA_REQUIRE(llmk::cuda::upload(nullptr, 0, empty_upload));
  CHECK(empty_upload.data() == nullptr);
}

TEST_CASE("A device allocation the device cannot hold reports the runtime's error and leaves the buffer empty") {
  DeviceBuffer b;
  CUDA_REQUIRE(b.allocate(256));
  const size_t too_many = size_t{1} << 60;
  CHECK(b.allocate(too_many) == cudaErrorMemoryAllocation);
  CHECK(b.data() == nullptr);
  CHECK(b.bytes() == 0);
  (void)cudaGetLastError();  // the failed call leaves its error pending
}

#if !LLMK_CUDA_NATIVE
// The simulation's free memory is exact (a GPU's moves in pages).
static size_t free_device_bytes() {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

TEST_CASE("A device buffer gives its memory back when it goes") {
  const size_t before = free_device_bytes();
  {
    DeviceBuffer b;
    CUDA_REQUIRE(b.allocate(1 << 20));
    CHECK(free_device_bytes() == before - (1 << 20));
    DeviceBuffer other;
    other = std::move(b);  // one owner: freed once, below
  }
  CHECK(free_device_bytes() == before);
}
#endif
