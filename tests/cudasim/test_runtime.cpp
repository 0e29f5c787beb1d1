// The runtime subset: memory, copies, memset, streams, events, properties,
// errors, launch checks, and stream capture + graph replay against eager runs.
#include <algorithm>
#include <cstring>

#include "test_kernels.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;

TEST_CASE("Copies move bytes host to device to device to host, and memset fills bytes") {
  reset_simulator(1);
  const auto x = random_floats(1000, 1);
  float* pinned = nullptr;
  CUDA_REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pinned), x.size() * sizeof(float)));
  std::memcpy(pinned, x.data(), x.size() * sizeof(float));
  device_buffer<float> a(x.size()), b(x.size());
  cudaStream_t stream;
  CUDA_REQUIRE(cudaStreamCreate(&stream));
  CUDA_REQUIRE(cudaMemcpyAsync(a.get(), pinned, x.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
  CUDA_REQUIRE(cudaMemcpyAsync(b.get(), a.get(), x.size() * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  CUDA_REQUIRE(cudaMemsetAsync(a.get(), 0, 10 * sizeof(float), stream));
  CUDA_REQUIRE(cudaStreamSynchronize(stream));
  REQUIRE(b.download() == x);
  const auto a_host = a.download();
  for (int i = 0; i < 10; ++i) REQUIRE(a_host[i] == 0.0f);
  REQUIRE(std::equal(a_host.begin() + 10, a_host.end(), x.begin() + 10));

  std::vector<unsigned char> bytes(37);
  device_buffer<unsigned char> c(bytes.size());
  CUDA_REQUIRE(cudaMemset(c.get(), 0xab, bytes.size()));
  REQUIRE(c.download() == std::vector<unsigned char>(bytes.size(), 0xab));

  // 2D copy: 3 rows of 5 floats out of a pitch of 8.
  std::vector<float> src(24);
  for (int i = 0; i < 24; ++i) src[i] = static_cast<float>(i);
  device_buffer<float> dst(15);
  CUDA_REQUIRE(cudaMemcpy2D(dst.get(), 5 * sizeof(float), src.data(), 8 * sizeof(float), 5 * sizeof(float), 3,
                            cudaMemcpyHostToDevice));
  const auto d = dst.download();
  for (int r = 0; r < 3; ++r)
    for (int col = 0; col < 5; ++col) REQUIRE(d[r * 5 + col] == src[r * 8 + col]);
  CUDA_REQUIRE(cudaStreamDestroy(stream));
  CUDA_REQUIRE(cudaFreeHost(pinned));
}

#if !LLMK_CUDA_NATIVE
// The simulation's own checks, its device size and its device record:
// simulation only (a real device's memory and limits are its own).
TEST_CASE("Copies whose pointers contradict their kind fail with cudaErrorInvalidValue") {
  reset_simulator(1);
  std::vector<float> host(4);
  device_buffer<float> dev(4);
  REQUIRE(cudaMemcpy(host.data(), host.data() + 2, 8, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  REQUIRE(cudasim::last_error_detail().find("copy kind") != std::string::npos);
  REQUIRE(cudaMemcpy(dev.get(), host.data(), 4 * sizeof(float), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  // One byte past the allocation is outside it.
  REQUIRE(cudaMemcpy(dev.get(), host.data(), 5 * sizeof(float), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  REQUIRE(cudaMemset(host.data(), 0, 4) == cudaErrorInvalidValue);
  REQUIRE(cudaFree(host.data()) == cudaErrorInvalidValue);
  REQUIRE(cudaGetLastError() == cudaErrorInvalidValue);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  REQUIRE(std::string(cudaGetErrorName(cudaErrorInvalidValue)) == "cudaErrorInvalidValue");
  REQUIRE(std::string(cudaGetErrorString(cudaErrorMemoryAllocation)) == "out of memory");
}

TEST_CASE("cudaMemGetInfo accounts for allocations and cudaMalloc fails past the device size") {
  reset_simulator(1);
  cudasim::set_device_memory_bytes(std::size_t{1} << 20);
  std::size_t free0 = 0, total = 0;
  CUDA_REQUIRE(cudaMemGetInfo(&free0, &total));
  REQUIRE(total == (std::size_t{1} << 20));
  void* p = nullptr;
  CUDA_REQUIRE(cudaMalloc(&p, 1000));
  std::size_t free1 = 0;
  CUDA_REQUIRE(cudaMemGetInfo(&free1, &total));
  REQUIRE(free0 - free1 == 1000);
  void* too_big = nullptr;
  REQUIRE(cudaMalloc(&too_big, std::size_t{2} << 20) == cudaErrorMemoryAllocation);
  CUDA_REQUIRE(cudaFree(p));
  CUDA_REQUIRE(cudaMemGetInfo(&free1, &total));
  REQUIRE(free1 == free0);
  cudasim::set_device_memory_bytes(std::size_t{80} << 30);
  (void)cudaGetLastError();
}

TEST_CASE("The simulated device reports one device with H100-like limits") {
  reset_simulator(1);
  int count = 0;
  CUDA_REQUIRE(cudaGetDeviceCount(&count));
  REQUIRE(count == 1);
  CUDA_REQUIRE(cudaSetDevice(0));
  REQUIRE(cudaSetDevice(1) == cudaErrorInvalidDevice);
  cudaDeviceProp prop;
  CUDA_REQUIRE(cudaGetDeviceProperties(&prop, 0));
  REQUIRE(prop.warpSize == 32);
  REQUIRE(prop.maxThreadsPerBlock == 1024);
  REQUIRE(prop.major == 9);
  REQUIRE(std::string(prop.name).find("cudasim") != std::string::npos);
  (void)cudaGetLastError();
}
#endif  // !LLMK_CUDA_NATIVE

TEST_CASE("Events record in stream order and give a non-negative elapsed time") {
  reset_simulator(1);
  cudaStream_t stream;
  CUDA_REQUIRE(cudaStreamCreate(&stream));
  cudaEvent_t start, stop, untimed;
  CUDA_REQUIRE(cudaEventCreate(&start));
  CUDA_REQUIRE(cudaEventCreate(&stop));
  CUDA_REQUIRE(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
  float ms = -1.0f;
  REQUIRE(cudaEventElapsedTime(&ms, start, stop) == cudaErrorInvalidResourceHandle);  // never recorded
  device_buffer<float> x(random_floats(300, 1)), y(std::vector<float>(300, 1.0f));
  CUDA_REQUIRE(cudaEventRecord(start, stream));
  axpy(2.0f, x.get(), y.get(), 300, stream);
  CUDA_REQUIRE(cudaEventRecord(stop, stream));
  CUDA_REQUIRE(cudaEventRecord(untimed, stream));
  CUDA_REQUIRE(cudaEventSynchronize(stop));
  CUDA_REQUIRE(cudaEventElapsedTime(&ms, start, stop));
  REQUIRE(ms >= 0.0f);
  REQUIRE(cudaEventElapsedTime(&ms, start, untimed) == cudaErrorInvalidResourceHandle);
  for (auto* e : {start, stop, untimed}) CUDA_REQUIRE(cudaEventDestroy(e));
  CUDA_REQUIRE(cudaStreamDestroy(stream));
  (void)cudaGetLastError();
}

// The error code is the one the CUDA 13.0 runtime returned on an H200
// (driver 580): cudaErrorInvalidValue, not cudaErrorInvalidConfiguration.
TEST_CASE("Launches with more than 1024 threads per block fail with cudaErrorInvalidValue") {
  reset_simulator(1);
  device_buffer<float> x(64), out(1);
  row_sum_shuffle(x.get(), out.get(), 1, 64, 2048, nullptr);  // more than 1024 threads
  REQUIRE(cudaGetLastError() == cudaErrorInvalidValue);
#if !LLMK_CUDA_NATIVE
  REQUIRE(cudasim::last_error_detail().find("row_sum_shuffle_kernel") != std::string::npos);
#endif
}

TEST_CASE("A captured graph replays the recorded copies and launches, equal to running them eagerly") {
  const int n = 517;
  const auto x = random_floats(n, 31), y0 = random_floats(n, 32);
  // The captured uploads read pinned memory, as the executor's captured
  // uploads do; this test, which also runs natively (test_cuda_native), does
  // not rely on the real runtime capturing copies from pageable memory.
  float* pinned = nullptr;  // [2n]: x, then y0
  CUDA_REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pinned), 2 * n * sizeof(float)));
  std::copy(x.begin(), x.end(), pinned);
  std::copy(y0.begin(), y0.end(), pinned + n);
  for (auto seed : seeds) {
    reset_simulator(seed);
    cudaStream_t stream;
    CUDA_REQUIRE(cudaStreamCreate(&stream));
    device_buffer<float> dx(n), dy(n), dsum(1);
    std::vector<float> eager_y, eager_sum;
    {  // Eager: upload, y = 2x + y twice, row sum of y.
      CUDA_REQUIRE(cudaMemcpyAsync(dx.get(), x.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
      CUDA_REQUIRE(cudaMemcpyAsync(dy.get(), y0.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
      axpy(2.0f, dx.get(), dy.get(), n, stream);
      axpy(2.0f, dx.get(), dy.get(), n, stream);
      row_sum_shuffle(dy.get(), dsum.get(), 1, n, 128, stream);
      CUDA_REQUIRE(cudaStreamSynchronize(stream));
      eager_y = dy.download();
      eager_sum = dsum.download();
    }
    CUDA_REQUIRE(cudaMemset(dy.get(), 0, n * sizeof(float)));
    CUDA_REQUIRE(cudaMemset(dsum.get(), 0, sizeof(float)));
#if !LLMK_CUDA_NATIVE
    const auto launches_before = cudasim::num_launches();
#endif
    cudaGraph_t graph;
    CUDA_REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureStatus status;
    CUDA_REQUIRE(cudaStreamIsCapturing(stream, &status));
    REQUIRE(status == cudaStreamCaptureStatusActive);
    CUDA_REQUIRE(cudaMemcpyAsync(dx.get(), pinned, n * sizeof(float), cudaMemcpyHostToDevice, stream));
    CUDA_REQUIRE(cudaMemcpyAsync(dy.get(), pinned + n, n * sizeof(float), cudaMemcpyHostToDevice, stream));
    axpy(2.0f, dx.get(), dy.get(), n, stream);
    axpy(2.0f, dx.get(), dy.get(), n, stream);
    row_sum_shuffle(dy.get(), dsum.get(), 1, n, 128, stream);
    CUDA_REQUIRE(cudaStreamEndCapture(stream, &graph));
    CUDA_REQUIRE(cudaGetLastError());
    // Capturing records; nothing ran.
#if !LLMK_CUDA_NATIVE
    REQUIRE(cudasim::num_launches() == launches_before);
#endif
    REQUIRE(dy.download() == std::vector<float>(n, 0.0f));
    cudaGraphExec_t exec;
    CUDA_REQUIRE(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 2; ++replay) {  // replays start from the uploaded inputs each time
      CUDA_REQUIRE(cudaGraphLaunch(exec, stream));
      CUDA_REQUIRE(cudaStreamSynchronize(stream));
      REQUIRE(dy.download() == eager_y);
      REQUIRE(dsum.download() == eager_sum);
    }
#if !LLMK_CUDA_NATIVE
    REQUIRE(cudasim::num_launches() == launches_before + 6);
#endif
    CUDA_REQUIRE(cudaGraphExecDestroy(exec));
    CUDA_REQUIRE(cudaGraphDestroy(graph));
    CUDA_REQUIRE(cudaStreamDestroy(stream));
  }
  CUDA_REQUIRE(cudaFreeHost(pinned));
}

#if !LLMK_CUDA_NATIVE
// How the simulation reports misuse of capture: simulation only (the real
// runtime invalidates the capture instead of only failing the call).
TEST_CASE("Capture is refused on the legacy default stream and synchronising a capturing stream fails") {
  reset_simulator(1);
  REQUIRE(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal) == cudaErrorStreamCaptureUnsupported);
  cudaStream_t stream;
  CUDA_REQUIRE(cudaStreamCreate(&stream));
  CUDA_REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  REQUIRE(cudaStreamSynchronize(stream) == cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph;
  CUDA_REQUIRE(cudaStreamEndCapture(stream, &graph));
  REQUIRE(graph != nullptr);
  CUDA_REQUIRE(cudaGraphDestroy(graph));
  CUDA_REQUIRE(cudaStreamDestroy(stream));
  (void)cudaGetLastError();
}
#endif  // !LLMK_CUDA_NATIVE
