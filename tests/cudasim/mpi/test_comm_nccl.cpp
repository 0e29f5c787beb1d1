// comm.nccl loaded through the engine's PluginRegistry on every rank of an
// mpirun launch: its simulated twin on 2 and 3 ranks (test_comm_nccl_sim),
// and the shipped plugin on a real GPU at world size 1
// (test_comm_nccl_native, LLMK_CUDA_NATIVE=1, skipped without a GPU). The
// plugin joins the world itself (it initializes MPI here, and finalizes it
// when the world goes); each rank checks results against its own float64
// or ring-order expectation (at world size 1 the sum is the input itself),
// and the ranks' failure counts travel through the plugin's own
// all_gather. Rank 0 exits 1 if any rank failed.
#include <cuda_runtime.h>
#include <mpi.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/plugin_loader.hpp"
#include "tests/support/skip.hpp"

#ifndef LLMK_CUDA_NATIVE
#define LLMK_CUDA_NATIVE 0
#endif
#include "tests/cudasim/mpi/mpi_test_support.hpp"

namespace {

using llmk::mpi_test::Report;
namespace mt = llmk::mpi_test;
namespace ct = llmk::cudasim_test;

struct Ctx {
  const llmk_comm_api* api = nullptr;
  void* comm = nullptr;
  int rank = 0, size = 1;
  cudaStream_t stream = nullptr;
  Report* report = nullptr;
  llmk_error err{};
  bool ok(int status, const std::string& what) {
    report->check(status == LLMK_OK, what + ": status " + std::to_string(status) + " " + err.message);
    return status == LLMK_OK;
  }
  // A call that must fail with `want`, its message naming `words`.
  void refused(int status, int want, const std::string& what, const std::string& words) {
    report->check(status == want && std::string(err.message).find(words) != std::string::npos,
                  what + ": status " + std::to_string(status) + " '" + err.message + "', want " + std::to_string(want) +
                      " naming '" + words + "'");
  }
};

template <class T>
T* device_copy(const std::vector<T>& h, cudaStream_t stream) {
  void* p = nullptr;
  cudaMalloc(&p, std::max<std::size_t>(h.size(), 1) * sizeof(T));
  cudaMemcpyAsync(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, stream);
  return static_cast<T*>(p);
}
template <class T>
std::vector<T> download(const T* d, std::size_t n, cudaStream_t stream) {
  std::vector<T> h(n);
  cudaMemcpyAsync(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  return h;
}

void all_reduce_f32(Ctx& c) {
  const std::size_t count = 257;
  std::vector<float> in(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = mt::input_f32(c.rank, i, 11);
  float* buf = device_copy(in, c.stream);
  if (c.ok(c.api->all_reduce(c.comm, buf, buf, count, LLMK_DTYPE_F32, LLMK_REDUCE_SUM, c.stream, &c.err),
           "all_reduce f32 in place")) {
    const std::vector<float> got = download(buf, count, c.stream);
    for (std::size_t i = 0; i < count; ++i) {
      double exact = 0, magnitude = 0;
      for (int r = 0; r < c.size; ++r) {
        exact += mt::input_f32(r, i, 11);
        magnitude += std::abs(mt::input_f32(r, i, 11));
      }
      if (std::abs(got[i] - exact) > (c.size - 1) * std::ldexp(1.0, -24) * magnitude) {
        c.report->check(false, "all_reduce f32: element " + std::to_string(i) + " is " + std::to_string(got[i]) +
                                   ", float64 sum " + std::to_string(exact));
        break;
      }
    }
  }
  cudaFree(buf);
}

void all_reduce_16(Ctx& c, llmk_dtype dtype) {
  const std::size_t count = 130;
  const ct::float_format& format = ct::format_of(dtype);
  const std::string name = std::string("all_reduce ") + (dtype == LLMK_DTYPE_BF16 ? "bf16" : "f16") + " out of place";
  std::vector<uint16_t> in(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = mt::input_16(c.rank, i, 12, format);
  uint16_t* send = device_copy(in, c.stream);
  uint16_t* recv = device_copy(std::vector<uint16_t>(count), c.stream);
  if (c.ok(c.api->all_reduce(c.comm, send, recv, count, dtype, LLMK_REDUCE_SUM, c.stream, &c.err), name)) {
    const std::vector<uint16_t> got = download(recv, count, c.stream);
    for (std::size_t i = 0; i < count; ++i) {
      auto value = [&](int r) { return ct::decode_16(mt::input_16(r, i, 12, format), format); };
      const double want = mt::ring_sum_16(i, count, c.size, format, value);
      if (ct::decode_16(got[i], format) != want) {
        c.report->check(false, name + ": element " + std::to_string(i) + " is " +
                                   std::to_string(ct::decode_16(got[i], format)) + ", the ring order gives " +
                                   std::to_string(want));
        break;
      }
    }
  }
  cudaFree(send);
  cudaFree(recv);
}

void gather_and_broadcast(Ctx& c) {
  const std::size_t count = 5;
  std::vector<int32_t> mine(count);
  for (std::size_t i = 0; i < count; ++i) mine[i] = static_cast<int32_t>(mt::hash(c.rank, i, 13));
  int32_t* send = device_copy(mine, c.stream);
  int32_t* all = device_copy(std::vector<int32_t>(count * c.size), c.stream);
  if (c.ok(c.api->all_gather(c.comm, send, all, count, LLMK_DTYPE_I32, c.stream, &c.err), "all_gather i32")) {
    const std::vector<int32_t> got = download(all, count * c.size, c.stream);
    for (int r = 0; r < c.size; ++r)
      for (std::size_t i = 0; i < count; ++i)
        c.report->check(got[r * count + i] == static_cast<int32_t>(mt::hash(r, i, 13)),
                        "all_gather i32: rank " + std::to_string(r) + "'s element " + std::to_string(i));
  }
  const int root = c.size - 1;
  std::vector<uint8_t> bytes(9);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(c.rank == root ? 200 + i : 0);
  uint8_t* buf = device_copy(bytes, c.stream);
  if (c.ok(c.api->broadcast(c.comm, buf, bytes.size(), LLMK_DTYPE_U8, root, c.stream, &c.err), "broadcast u8")) {
    const std::vector<uint8_t> got = download(buf, bytes.size(), c.stream);
    for (std::size_t i = 0; i < got.size(); ++i)
      c.report->check(got[i] == 200 + i, "broadcast from rank " + std::to_string(root) + ": byte " + std::to_string(i));
  }
  cudaFree(send);
  cudaFree(all);
  cudaFree(buf);
}

// In one group, every rank sends to the next and receives from the previous;
// even ranks post the send first, odd ranks the receive.
void send_recv_group(Ctx& c) {
  const std::size_t count = 21;
  const int next = (c.rank + 1) % c.size, prev = (c.rank + c.size - 1) % c.size;
  std::vector<uint16_t> out(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<uint16_t>(mt::hash(c.rank, i, 14));
  uint16_t* send = device_copy(out, c.stream);
  uint16_t* recv = device_copy(std::vector<uint16_t>(count), c.stream);
  bool posted = c.ok(c.api->group_start(c.comm, &c.err), "group_start");
  auto post_send = [&] { posted &= c.ok(c.api->send(c.comm, send, count, LLMK_DTYPE_BF16, next, c.stream, &c.err), "send"); };
  auto post_recv = [&] { posted &= c.ok(c.api->recv(c.comm, recv, count, LLMK_DTYPE_BF16, prev, c.stream, &c.err), "recv"); };
  if (c.rank % 2 == 0) post_send(), post_recv();
  else post_recv(), post_send();
  posted &= c.ok(c.api->group_end(c.comm, c.stream, &c.err), "group_end");
  if (posted) {
    const std::vector<uint16_t> got = download(recv, count, c.stream);
    for (std::size_t i = 0; i < count; ++i)
      if (got[i] != static_cast<uint16_t>(mt::hash(prev, i, 14))) {
        c.report->check(false, "send/recv: element " + std::to_string(i) + " differs from rank " + std::to_string(prev) + "'s");
        break;
      }
  }
  c.ok(c.api->barrier(c.comm, c.stream, &c.err), "barrier");
  cudaFree(send);
  cudaFree(recv);
}

void split(Ctx& c) {
  void* half = nullptr;
  if (!c.ok(c.api->split(c.comm, c.rank % 2, c.rank, &half, &c.err), "split by parity")) return;
  int32_t rank = -1, size = -1;
  c.api->rank(half, &rank, &size, &c.err);
  c.report->check(rank == c.rank / 2 && size == (c.size - c.rank % 2 + 1) / 2,
                  "split by parity: rank " + std::to_string(rank) + " of " + std::to_string(size));
  float* x = device_copy(std::vector<float>{static_cast<float>(c.rank + 1)}, c.stream);
  if (c.ok(c.api->all_reduce(half, x, x, 1, LLMK_DTYPE_F32, LLMK_REDUCE_SUM, c.stream, &c.err), "all_reduce in the split")) {
    float want = 0;
    for (int r = c.rank % 2; r < c.size; r += 2) want += static_cast<float>(r + 1);
    c.report->check(download(x, 1, c.stream)[0] == want, "all_reduce in the parity group");
  }
  cudaFree(x);
  c.api->destroy(half);
  void* none = nullptr;  // every rank passes a negative color: all fail, none waits
  c.refused(c.api->split(c.comm, -3, 0, &none, &c.err), LLMK_ERR_INVALID_ARGUMENT, "split with color -3", "negative");
}

void misuse(Ctx& c) {
  float host[4] = {};
  float* dev = device_copy(std::vector<float>(4), c.stream);
  c.refused(c.api->all_reduce(c.comm, dev, dev, 4, LLMK_DTYPE_I32, LLMK_REDUCE_SUM, c.stream, &c.err),
            LLMK_ERR_INVALID_ARGUMENT, "all_reduce of i32", "not f32, f16 or bf16");
  c.refused(c.api->broadcast(c.comm, dev, 4, LLMK_DTYPE_F32, c.size, c.stream, &c.err), LLMK_ERR_INVALID_ARGUMENT,
            "broadcast from a rank past the end", "root " + std::to_string(c.size) + " is not a rank");
  c.refused(c.api->all_gather(c.comm, dev, dev, 4, LLMK_DTYPE_GGML_Q4_0, c.stream, &c.err), LLMK_ERR_INVALID_ARGUMENT,
            "all_gather of ggml blocks", "has no NCCL type");
#if !LLMK_CUDA_NATIVE  // the simulation checks every pointer; NCCL only with NCCL_CHECK_POINTERS=1
  c.refused(c.api->all_reduce(c.comm, host, dev, 4, LLMK_DTYPE_F32, LLMK_REDUCE_SUM, c.stream, &c.err),
            LLMK_ERR_INVALID_ARGUMENT, "all_reduce from host memory", "not inside one device allocation");
#else
  (void)host;
#endif
  cudaFree(dev);
}

// The plugin's promises that need no world.
void describe(const llmk::Plugin& plugin, Report& report) {
  const auto caps = nlohmann::json::parse(plugin.info().capabilities);
  report.check(caps.value("transport", "") == "nccl" && caps["devices"] == nlohmann::json::array({"cuda"}),
               "capabilities: " + plugin.info().capabilities);
  char why[256] = {};
  llmk_comm_desc cpu{sizeof(llmk_comm_desc), LLMK_DEVICE_CPU, -1, 0.0, "{}"};
  report.check(plugin.comm().supports(&cpu, why, sizeof why) == 0 && std::string(why).find("cpu") != std::string::npos,
               std::string("supports() on the CPU: ") + why);
  llmk_comm_desc options{sizeof(llmk_comm_desc), LLMK_DEVICE_CUDA, -1, 0.0, R"({"ring":true})"};
  report.check(plugin.comm().supports(&options, why, sizeof why) == 0 && std::string(why).find("no options") != std::string::npos,
               std::string("supports() with an option: ") + why);
}

}  // namespace

// With --mpi-first the program initializes MPI itself before the world
// forms (as comm.mpi would): the plugin must use it and leave it running.
// With --abort the last rank calls abort(3) while the others wait in a
// barrier: the job must end (CTest reads mpirun's report of the code).
int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool mpi_first = mode == "--mpi-first";
#if LLMK_CUDA_NATIVE
  int num_devices = 0;
  if (cudaGetDeviceCount(&num_devices) != cudaSuccess || num_devices == 0) {
    llmk::test::announce_skip("no CUDA device");
    return 0;
  }
#endif
  const int world_rank = std::atoi(std::getenv("OMPI_COMM_WORLD_RANK") ? std::getenv("OMPI_COMM_WORLD_RANK") : "0");
  const int world_size = std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE") ? std::getenv("OMPI_COMM_WORLD_SIZE") : "1");
  Report report(world_rank);
  llmk::PluginRegistry registry({LLMK_CUDASIM_PLUGIN_DIR});
  const llmk::Plugin plugin = registry.load("comm.nccl", LLMK_PLUGIN_COMM);
  describe(plugin, report);

  int initialized = 0, finalized = 0, provided = 0;
  if (mpi_first) MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Initialized(&initialized);
  report.check(initialized == (mpi_first ? 1 : 0), "MPI was initialized before the plugin joined the world");
  Ctx c;
  c.api = &plugin.comm();
  c.report = &report;
  const llmk_comm_desc desc{sizeof(llmk_comm_desc), LLMK_DEVICE_CUDA, -1, 30.0, "{}"};
  c.comm = c.api->create(&desc, &c.err);
  if (c.comm == nullptr) {
    std::fprintf(stderr, "rank %d: create failed: %s\n", world_rank, c.err.message);
    return 1;
  }
  int32_t rank = -1, size = -1;
  c.api->rank(c.comm, &rank, &size, &c.err);
  c.rank = rank;
  c.size = size;
  report.check(rank == world_rank && size == world_size, "rank() disagrees with mpirun's OMPI_COMM_WORLD_RANK/SIZE");
  cudaStreamCreate(&c.stream);
  if (mode == "--abort") {
    if (c.rank == c.size - 1) c.api->abort(c.comm, 3);
    c.api->barrier(c.comm, c.stream, &c.err);
    cudaStreamSynchronize(c.stream);
    std::fprintf(stderr, "rank %d: still running after another rank's abort\n", c.rank);
    return 1;
  }
  all_reduce_f32(c);
  all_reduce_16(c, LLMK_DTYPE_F16);
  all_reduce_16(c, LLMK_DTYPE_BF16);
  gather_and_broadcast(c);
  send_recv_group(c);
  split(c);
  misuse(c);

  // The failure counts, gathered through the plugin.
  int32_t* counts = device_copy(std::vector<int32_t>(static_cast<std::size_t>(c.size)), c.stream);
  int32_t* mine = device_copy(std::vector<int32_t>{report.num_failures()}, c.stream);
  c.api->all_gather(c.comm, mine, counts, 1, LLMK_DTYPE_I32, c.stream, &c.err);
  const std::vector<int32_t> all = download(counts, static_cast<std::size_t>(c.size), c.stream);
  report.check(all[static_cast<std::size_t>(c.rank)] == report.num_failures(), "the gathered failure counts");
  cudaFree(counts);
  cudaFree(mine);
  cudaStreamDestroy(c.stream);
  c.api->destroy(c.comm);
  MPI_Finalized(&finalized);
  report.check(finalized == (mpi_first ? 0 : 1), mpi_first ? "destroying the world finalized the program's MPI"
                                                           : "destroying the world left MPI running (the plugin initialized it)");
  if (mpi_first && finalized == 0) MPI_Finalize();

  report.print();
  int total = report.num_failures();
  for (int r = 0; r < c.size; ++r)
    if (r != c.rank) total += all[static_cast<std::size_t>(r)];
  if (c.rank == 0) std::printf("comm.nccl on %d rank(s): %d failure(s)\n", c.size, total);
  return (c.rank == 0 && total > 0) || report.num_failures() > 0 ? 1 : 0;
}
