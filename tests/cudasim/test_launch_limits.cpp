// Launch limits as the hardware applies them: static plus dynamic shared
// memory against 48 KiB, or against the opt-in maximum once
// cudaFuncSetAttribute raised the kernel's dynamic limit. The simulation
// sees a kernel's static shared memory as the bytes it touched, and fails the
// launch at the synchronisation (a GPU refuses it at the launch, with
// cudaErrorInvalidValue): nothing of this runs natively.
// The 40 KiB kernel is never opted in, the 8 KiB one is (the attribute stays
// set for the rest of the process, as on a GPU).
#include <string>

#include "test_kernels.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;

#if !LLMK_CUDA_NATIVE

namespace {

constexpr std::size_t kib = 1024;

// Runs shared_fill on the legacy stream; returns the synchronisation's status
// and the sum the kernel wrote (-1 if it wrote none).
std::pair<cudaError_t, float> fill(int static_kib, std::size_t dynamic_bytes, int opt_in_bytes) {
  device_buffer<float> out(std::vector<float>{-1.0f});
  const cudaError_t launched = shared_fill(out.get(), static_kib, dynamic_bytes, opt_in_bytes, nullptr);
  if (launched != cudaSuccess) return {launched, -1.0f};
  const cudaError_t synced = cudaDeviceSynchronize();
  return {synced, out.get()[0]};
}

}  // namespace

TEST_CASE("Static plus dynamic shared memory up to 48 KiB launches without an opt-in") {
  reset_simulator(1);
  const auto [status, sum] = fill(40, 8 * kib, 0);
  CUDA_REQUIRE(status);
  REQUIRE(sum == static_cast<float>((40 + 8) * kib / 4));
}

TEST_CASE("Static plus dynamic shared memory past 48 KiB fails without an opt-in, naming both parts") {
  reset_simulator(1);
  const auto [status, sum] = fill(40, 8 * kib + 4, 0);
  REQUIRE(status == cudaErrorLaunchOutOfResources);
  const std::string detail = cudasim::last_error_detail();
  INFO(detail);
  REQUIRE(detail.rfind("kernel 'shared_fill_kernel<kStaticFloats>': 40960 bytes of static shared memory + 8196 dynamic = "
                       "49156, above the 49152 a kernel gets without cudaFuncSetAttribute",
                       0) == 0);
  (void)cudaGetLastError();
}

TEST_CASE("An opted-in kernel may use static plus dynamic shared memory up to the device's opt-in maximum") {
  reset_simulator(1);
  {
    const auto [status, sum] = fill(8, 200 * kib, 200 * kib);
    CUDA_REQUIRE(status);
    REQUIRE(sum == static_cast<float>((8 + 200) * kib / 4));
  }
  {
    // 8 KiB + 220 KiB = 228 KiB, above the 227 KiB a block may have.
    const auto [status, sum] = fill(8, 220 * kib, 220 * kib);
    REQUIRE(status == cudaErrorLaunchOutOfResources);
    INFO(cudasim::last_error_detail());
    REQUIRE(cudasim::last_error_detail().find("= 233472, above the device's 232448 per block") != std::string::npos);
    (void)cudaGetLastError();
  }
  {
    // Dynamic shared memory above the kernel's raised limit (220 KiB now) is refused at the launch.
    device_buffer<float> out(1);
    REQUIRE(shared_fill(out.get(), 8, 221 * kib, 0, nullptr) == cudaErrorInvalidValue);
    INFO(cudasim::last_error_detail());
    REQUIRE(cudasim::last_error_detail().find("above its limit of 225280") != std::string::npos);
  }
}

#endif  // !LLMK_CUDA_NATIVE
