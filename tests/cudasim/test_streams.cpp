// When stream work runs in the simulation: deferred until the host waits for
// it (the default), in stream order and across event waits, and the pinned
// memory hazard a queued copy exposes; eager mode runs everything at issue.
// Device memory is host memory here, so the tests look at it directly to see
// what has and has not run yet (nothing of this runs natively).
#include <cstring>
#include <string>

#include "test_kernels.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;

#if !LLMK_CUDA_NATIVE

namespace {

struct stream_guard {
  cudaStream_t s = nullptr;
  stream_guard() { CUDA_REQUIRE(cudaStreamCreate(&s)); }
  ~stream_guard() { cudaStreamDestroy(s); }
};

struct pinned_floats {
  float* p = nullptr;
  explicit pinned_floats(std::size_t n) { CUDA_REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&p), n * sizeof(float))); }
  ~pinned_floats() { cudaFreeHost(p); }
};

}  // namespace

TEST_CASE("Deferred stream work runs when the stream is synchronised, in issue order") {
  reset_simulator(1);
  REQUIRE(cudasim::get_execution_mode() == cudasim::execution_mode::deferred);
  stream_guard stream;
  device_buffer<float> x(std::vector<float>(64, 1.0f)), y(std::vector<float>(64, 2.0f));
  CUDA_REQUIRE(cudaMemsetAsync(x.get(), 0, 64 * sizeof(float), stream.s));
  axpy(3.0f, x.get(), y.get(), 64, stream.s);  // y = 3 * 0 + 2 once the memset ran first
  CUDA_REQUIRE(cudaMemcpyAsync(x.get(), y.get(), 64 * sizeof(float), cudaMemcpyDeviceToDevice, stream.s));
  REQUIRE(x.get()[5] == 1.0f);  // nothing ran yet
  REQUIRE(y.get()[5] == 2.0f);
  CUDA_REQUIRE(cudaStreamSynchronize(stream.s));
  REQUIRE(x.download() == std::vector<float>(64, 2.0f));
}

TEST_CASE("A stream waiting on an event runs the event's stream up to its record, not past it") {
  reset_simulator(1);
  stream_guard producer, consumer;
  cudaEvent_t ready;
  CUDA_REQUIRE(cudaEventCreate(&ready));
  device_buffer<float> x(std::vector<float>(16, 0.0f)), y(std::vector<float>(16, 0.0f));
  CUDA_REQUIRE(cudaMemcpyAsync(x.get(), std::vector<float>(16, 4.0f).data(), 16 * sizeof(float),
                               cudaMemcpyHostToDevice, producer.s));
  CUDA_REQUIRE(cudaEventRecord(ready, producer.s));
  CUDA_REQUIRE(cudaMemsetAsync(x.get(), 0, 16 * sizeof(float), producer.s));  // after the record
  CUDA_REQUIRE(cudaStreamWaitEvent(consumer.s, ready, 0));
  CUDA_REQUIRE(cudaMemcpyAsync(y.get(), x.get(), 16 * sizeof(float), cudaMemcpyDeviceToDevice, consumer.s));
  CUDA_REQUIRE(cudaStreamSynchronize(consumer.s));
  REQUIRE(y.get()[0] == 4.0f);  // the copy saw the producer's work up to the record
  REQUIRE(x.get()[0] == 4.0f);  // and the memset after it has not run
  CUDA_REQUIRE(cudaEventSynchronize(ready));
  REQUIRE(x.get()[0] == 4.0f);
  CUDA_REQUIRE(cudaDeviceSynchronize());
  REQUIRE(x.get()[0] == 0.0f);
  CUDA_REQUIRE(cudaEventDestroy(ready));
}

TEST_CASE("Pageable sources are staged at the call, and pageable destinations are filled before it returns") {
  reset_simulator(1);
  stream_guard stream;
  device_buffer<float> x(8);
  std::vector<float> host(8, 7.0f);
  CUDA_REQUIRE(cudaMemcpyAsync(x.get(), host.data(), 8 * sizeof(float), cudaMemcpyHostToDevice, stream.s));
  host.assign(8, -1.0f);  // allowed: the bytes were staged
  std::vector<float> back(8, 0.0f);
  CUDA_REQUIRE(cudaMemcpyAsync(back.data(), x.get(), 8 * sizeof(float), cudaMemcpyDeviceToHost, stream.s));
  REQUIRE(back == std::vector<float>(8, 7.0f));
  REQUIRE(cudasim::hazard_count() == 0);
}

TEST_CASE("A copy into pinned memory lands only when waited for") {
  reset_simulator(1);
  stream_guard stream;
  pinned_floats pinned(8);
  std::memset(pinned.p, 0, 8 * sizeof(float));
  device_buffer<float> x(std::vector<float>(8, 5.0f));
  CUDA_REQUIRE(cudaMemcpyAsync(pinned.p, x.get(), 8 * sizeof(float), cudaMemcpyDeviceToHost, stream.s));
  REQUIRE(pinned.p[3] == 0.0f);  // a host reading it now reads stale bytes
  CUDA_REQUIRE(cudaStreamSynchronize(stream.s));
  REQUIRE(pinned.p[3] == 5.0f);
}

TEST_CASE("Rewriting pinned memory a queued copy still reads is a hazard that fails the synchronisation") {
  reset_simulator(1);
  stream_guard stream;
  pinned_floats staging(32);
  device_buffer<float> x(32);
  cudaEvent_t uploaded;
  CUDA_REQUIRE(cudaEventCreate(&uploaded));
  for (int i = 0; i < 32; ++i) staging.p[i] = 1.0f;
  CUDA_REQUIRE(cudaMemcpyAsync(x.get(), staging.p, 32 * sizeof(float), cudaMemcpyHostToDevice, stream.s));
  CUDA_REQUIRE(cudaEventRecord(uploaded, stream.s));
  SECTION("waiting for the upload's event first is safe") {
    CUDA_REQUIRE(cudaEventSynchronize(uploaded));
    staging.p[7] = 2.0f;
    CUDA_REQUIRE(cudaStreamSynchronize(stream.s));
    REQUIRE(cudasim::hazard_count() == 0);
    REQUIRE(x.download() == std::vector<float>(32, 1.0f));
  }
  SECTION("rewriting it before the upload ran is reported, naming the buffer and the byte") {
    staging.p[7] = 2.0f;
    REQUIRE(cudaStreamSynchronize(stream.s) == cudaErrorLaunchFailure);
    const std::string detail = cudasim::last_error_detail();
    INFO(detail);
    REQUIRE(detail.rfind("host/device hazard: the host wrote pinned memory at 0x", 0) == 0);
    // Element 7 starts at byte 28; 1.0f and 2.0f first differ in its third byte.
    REQUIRE(detail.find("(byte 30 of the 128 bytes at 0x") != std::string::npos);
    REQUIRE(detail.find("cudaMemcpyAsync of 128 bytes queued on stream") != std::string::npos);
    REQUIRE(detail.find("that read them had not run") != std::string::npos);
    REQUIRE(cudasim::hazard_count() == 1);
    REQUIRE(cudasim::hazards().front() == detail);
    (void)cudaGetLastError();
  }
  CUDA_REQUIRE(cudaEventDestroy(uploaded));
}

TEST_CASE("Eager mode runs stream work when it is issued") {
  reset_simulator(1);
  cudasim::set_execution_mode(cudasim::execution_mode::eager);
  stream_guard stream;
  device_buffer<float> x(std::vector<float>(4, 1.0f));
  CUDA_REQUIRE(cudaMemsetAsync(x.get(), 0, 4 * sizeof(float), stream.s));
  const float seen = x.get()[0];
  cudasim::set_execution_mode(cudasim::execution_mode::deferred);
  REQUIRE(seen == 0.0f);
}

TEST_CASE("cudaFree and the legacy stream wait for every stream's queued work") {
  reset_simulator(1);
  stream_guard stream;
  device_buffer<float> x(std::vector<float>(4, 1.0f));
  float* scratch = nullptr;
  CUDA_REQUIRE(cudaMalloc(reinterpret_cast<void**>(&scratch), 4 * sizeof(float)));
  CUDA_REQUIRE(cudaMemsetAsync(x.get(), 0, 4 * sizeof(float), stream.s));
  CUDA_REQUIRE(cudaFree(scratch));
  REQUIRE(x.get()[0] == 0.0f);
  CUDA_REQUIRE(cudaMemcpyAsync(x.get(), std::vector<float>(4, 3.0f).data(), 4 * sizeof(float),
                               cudaMemcpyHostToDevice, stream.s));
  REQUIRE(x.download() == std::vector<float>(4, 3.0f));  // cudaMemcpy on the legacy stream
}

#endif  // !LLMK_CUDA_NATIVE
