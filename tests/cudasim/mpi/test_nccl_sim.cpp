// The simulated NCCL subset (cudasim/nccl.cpp), called directly, on every
// rank of an mpirun launch (tests/cudasim/mpi/CMakeLists.txt: 2 and 4
// ranks). Each case checks each rank's results against values the rank
// computes itself: f32 sums against float64 within the ring's rounding
// bound and bit for bit across ranks, f16/bf16 sums exactly against the
// ring order the simulation states, moved data byte for byte. Every rank
// prints its failures; rank 0 exits 1 if any rank failed.
#include <mpi.h>
#include <nccl.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_compat.hpp"
#include "tests/cudasim/mpi/mpi_test_support.hpp"

namespace {

using llmk::mpi_test::Report;
namespace mt = llmk::mpi_test;
namespace ct = llmk::cudasim_test;

// Stream-order probes: a kernel writes the input before the collective and
// another reads its output after it, on the same stream.
__global__ void fill_ramp(float* x, int n, float base) {  // x: [n]
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] = base + static_cast<float>(i);
}
__global__ void twice_plus_one(const float* x, float* y, int n) {  // x, y: [n]
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}

struct Ctx {
  int rank = 0, size = 1;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  Report* report = nullptr;
  bool ok(ncclResult_t r, const std::string& what) {
    report->check(r == ncclSuccess, what + ": " + ncclGetErrorString(r) + " (" + ncclGetLastError(comm) + ")");
    return r == ncclSuccess;
  }
};

template <class T>
T* device_alloc(std::size_t n) {
  void* p = nullptr;
  cudaMalloc(&p, std::max<std::size_t>(n, 1) * sizeof(T));
  return static_cast<T*>(p);
}
template <class T>
std::vector<T> download(const T* d, std::size_t n, cudaStream_t stream) {
  std::vector<T> h(n);
  cudaMemcpyAsync(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  return h;
}
template <class T>
void upload(T* d, const std::vector<T>& h, cudaStream_t stream) {
  cudaMemcpyAsync(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, stream);
}

// Whether every rank holds the same bytes (gathered to each rank).
bool same_on_every_rank(const Ctx& c, const void* data, int bytes) {
  std::vector<unsigned char> all(static_cast<std::size_t>(bytes) * c.size);
  MPI_Allgather(data, bytes, MPI_BYTE, all.data(), bytes, MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 1; r < c.size; ++r)
    if (std::memcmp(all.data(), all.data() + static_cast<std::size_t>(r) * bytes, bytes) != 0) return false;
  return true;
}

void all_reduce_f32(Ctx& c, std::size_t count, bool in_place) {
  const std::string name = "all_reduce f32 count " + std::to_string(count) + (in_place ? " in place" : "");
  std::vector<float> in(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = mt::input_f32(c.rank, i, 1);
  float* send = device_alloc<float>(count);
  float* recv = in_place ? send : device_alloc<float>(count);
  upload(send, in, c.stream);
  if (!c.ok(ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, c.comm, c.stream), name)) return;
  const std::vector<float> got = download(recv, count, c.stream);
  for (std::size_t i = 0; i < count; ++i) {
    double exact = 0, magnitude = 0;
    for (int r = 0; r < c.size; ++r) {
      exact += mt::input_f32(r, i, 1);
      magnitude += std::abs(mt::input_f32(r, i, 1));
    }
    // n-1 additions, each off by at most half an f32 ulp of a partial sum.
    const double bound = (c.size - 1) * std::ldexp(1.0, -24) * magnitude;
    if (std::abs(got[i] - exact) > bound) {
      c.report->check(false, name + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) +
                                 ", float64 sum " + std::to_string(exact));
      break;
    }
  }
  c.report->check(same_on_every_rank(c, got.data(), static_cast<int>(count * 4)), name + ": ranks hold different bits");
  cudaFree(send);
  if (!in_place) cudaFree(recv);
}

void all_reduce_16(Ctx& c, ncclDataType_t dtype, std::size_t count, bool in_place) {
  const ct::float_format& format = dtype == ncclBfloat16 ? ct::kBf16Format : ct::kF16Format;
  const std::string name = std::string("all_reduce ") + (dtype == ncclBfloat16 ? "bf16" : "f16") + " count " +
                           std::to_string(count) + (in_place ? " in place" : "");
  std::vector<uint16_t> in(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = mt::input_16(c.rank, i, 2, format);
  uint16_t* send = device_alloc<uint16_t>(count);
  uint16_t* recv = in_place ? send : device_alloc<uint16_t>(count);
  upload(send, in, c.stream);
  if (!c.ok(ncclAllReduce(send, recv, count, dtype, ncclSum, c.comm, c.stream), name)) return;
  const std::vector<uint16_t> got = download(recv, count, c.stream);
  std::size_t num_order_dependent = 0;
  for (std::size_t i = 0; i < count; ++i) {
    auto value = [&](int r) { return ct::decode_16(mt::input_16(r, i, 2, format), format); };
    const double want = mt::ring_sum_16(i, count, c.size, format, value);
    num_order_dependent += want != mt::rank_order_sum_16(c.size, format, value);
    if (ct::decode_16(got[i], format) != want) {
      c.report->check(false, name + ": element " + std::to_string(i) + " is " +
                                 std::to_string(ct::decode_16(got[i], format)) + ", the ring order gives " +
                                 std::to_string(want));
      break;
    }
  }
  // With three or more ranks the inputs must tell the ring order from rank order.
  if (c.size >= 3 && count >= 64)
    c.report->check(num_order_dependent > 0, name + ": no element depends on the summation order");
  cudaFree(send);
  if (!in_place) cudaFree(recv);
}

// Kernel before, all-reduce, kernel after, on one stream, then the same
// captured into a graph and replayed twice with new inputs.
void stream_order(Ctx& c) {
  const int n = 300;
  float* x = device_alloc<float>(n);
  float* sum = device_alloc<float>(n);
  float* y = device_alloc<float>(n);
  auto want = [&](int i, float base_step) {
    double s = 0;
    for (int r = 0; r < c.size; ++r) s += r * base_step + i;
    return 2 * s + 1;
  };
  auto check = [&](const std::string& name, float base_step) {
    const std::vector<float> got = download(y, n, c.stream);
    for (int i = 0; i < n; ++i)
      if (got[i] != want(i, base_step)) {
        c.report->check(false, name + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) +
                                   ", want " + std::to_string(want(i, base_step)));
        return;
      }
  };
  LLMK_LAUNCH((n + 127) / 128, 128, 0, c.stream, fill_ramp)(x, n, 1000.0f * c.rank);
  if (c.ok(ncclAllReduce(x, sum, n, ncclFloat32, ncclSum, c.comm, c.stream), "stream order")) {
    LLMK_LAUNCH((n + 127) / 128, 128, 0, c.stream, twice_plus_one)(sum, y, n);
    check("stream order", 1000.0f);
  }

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeGlobal);
  const ncclResult_t captured = ncclAllReduce(x, sum, n, ncclFloat32, ncclSum, c.comm, c.stream);
  LLMK_LAUNCH((n + 127) / 128, 128, 0, c.stream, twice_plus_one)(sum, y, n);
  cudaStreamEndCapture(c.stream, &graph);
  cudaGraphInstantiate(&exec, graph, 0);
  if (c.ok(captured, "graph capture")) {
    for (int replay = 1; replay <= 2; ++replay) {
      std::vector<float> in(n);
      for (int i = 0; i < n; ++i) in[i] = 10.0f * replay * c.rank + i;
      upload(x, in, c.stream);
      cudaGraphLaunch(exec, c.stream);
      check("graph replay " + std::to_string(replay), 10.0f * replay);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(c.comm, &async);
      c.report->check(async == ncclSuccess, "graph replay: async error " + std::string(ncclGetErrorString(async)));
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(x);
  cudaFree(sum);
  cudaFree(y);
}

void all_gather(Ctx& c, std::size_t count, bool in_place) {
  const std::string name = "all_gather count " + std::to_string(count) + (in_place ? " in place" : "");
  uint8_t* recv = device_alloc<uint8_t>(count * c.size);
  uint8_t* send = in_place ? recv + count * c.rank : device_alloc<uint8_t>(count);
  std::vector<uint8_t> mine(count);
  for (std::size_t i = 0; i < count; ++i) mine[i] = static_cast<uint8_t>(mt::hash(c.rank, i, 3));
  upload(send, mine, c.stream);
  if (c.ok(ncclAllGather(send, recv, count, ncclUint8, c.comm, c.stream), name)) {
    const std::vector<uint8_t> got = download(recv, count * c.size, c.stream);
    for (int r = 0; r < c.size; ++r)
      for (std::size_t i = 0; i < count; ++i)
        if (got[r * count + i] != static_cast<uint8_t>(mt::hash(r, i, 3))) {
          c.report->check(false, name + ": rank " + std::to_string(r) + "'s byte " + std::to_string(i) + " differs");
          r = c.size;
          break;
        }
  }
  cudaFree(recv);
  if (!in_place) cudaFree(send);
}

void broadcast(Ctx& c, int root, bool in_place) {
  const std::size_t count = 45;
  const std::string name = "broadcast from root " + std::to_string(root) + (in_place ? " in place" : "");
  int32_t* recv = device_alloc<int32_t>(count);
  int32_t* send = nullptr;  // only the root's is read
  if (c.rank == root) {
    send = in_place ? recv : device_alloc<int32_t>(count);
    std::vector<int32_t> data(count);
    for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<int32_t>(mt::hash(root, i, 4));
    upload(send, data, c.stream);
  }
  if (c.ok(ncclBroadcast(send, recv, count, ncclInt32, root, c.comm, c.stream), name)) {
    const std::vector<int32_t> got = download(recv, count, c.stream);
    for (std::size_t i = 0; i < count; ++i)
      if (got[i] != static_cast<int32_t>(mt::hash(root, i, 4))) {
        c.report->check(false, name + ": element " + std::to_string(i) + " differs from the root's");
        break;
      }
  }
  if (send && send != recv) cudaFree(send);
  cudaFree(recv);
}

// Each rank sends two messages to the next rank and receives two from the
// previous one, in one group; even ranks post sends first, odd ranks
// receives first. The messages must arrive whole and in order.
void send_recv_ring(Ctx& c, bool grouped) {
  const std::size_t count = 33;
  const int next = (c.rank + 1) % c.size, prev = (c.rank + c.size - 1) % c.size;
  const std::string name = std::string("send/recv ring") + (grouped ? " in a group" : " in pairs");
  float* out = device_alloc<float>(2 * count);
  float* in = device_alloc<float>(2 * count);
  std::vector<float> data(2 * count);
  for (std::size_t i = 0; i < 2 * count; ++i) data[i] = mt::input_f32(c.rank, i, 5);
  upload(out, data, c.stream);
  bool posted = true;
  auto sends = [&] {
    for (int m = 0; m < 2; ++m) posted &= c.ok(ncclSend(out + m * count, count, ncclFloat32, next, c.comm, c.stream), name);
  };
  auto recvs = [&] {
    for (int m = 0; m < 2; ++m) posted &= c.ok(ncclRecv(in + m * count, count, ncclFloat32, prev, c.comm, c.stream), name);
  };
  if (grouped) {
    ncclGroupStart();
    if (c.rank % 2 == 0) sends(), recvs();
    else recvs(), sends();
    posted &= c.ok(ncclGroupEnd(), name + ": ncclGroupEnd");
  } else if (c.rank % 2 == 0) {  // outside a group each pair must meet: even ranks send first
    sends(), recvs();
  } else {
    recvs(), sends();
  }
  if (posted) {
    const std::vector<float> got = download(in, 2 * count, c.stream);
    for (std::size_t i = 0; i < 2 * count; ++i)
      if (got[i] != mt::input_f32(prev, i, 5)) {
        c.report->check(false, name + ": element " + std::to_string(i) + " differs from rank " + std::to_string(prev) + "'s");
        break;
      }
  }
  cudaFree(out);
  cudaFree(in);
}

// Two groups by parity, ranked in reverse (key = -rank); then one where rank 0 takes no part.
void split(Ctx& c) {
  ncclComm_t half = nullptr;
  if (!c.ok(ncclCommSplit(c.comm, c.rank % 2, -c.rank, &half, nullptr), "split by parity")) return;
  int count = 0, rank = -1;
  ncclCommCount(half, &count);
  ncclCommUserRank(half, &rank);
  const int want_count = (c.size - c.rank % 2 + 1) / 2;
  int want_rank = 0;  // members with a larger world rank come first
  for (int r = c.rank + 2; r < c.size; r += 2) ++want_rank;
  c.report->check(count == want_count && rank == want_rank,
                  "split by parity: rank " + std::to_string(rank) + " of " + std::to_string(count) + ", want " +
                      std::to_string(want_rank) + " of " + std::to_string(want_count));
  float* x = device_alloc<float>(1);
  upload(x, std::vector<float>{static_cast<float>(c.rank + 1)}, c.stream);
  if (c.ok(ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, half, c.stream), "all_reduce in a split group")) {
    float want = 0;
    for (int r = c.rank % 2; r < c.size; r += 2) want += static_cast<float>(r + 1);
    const float got = download(x, 1, c.stream)[0];
    c.report->check(got == want, "all_reduce in the parity group gave " + std::to_string(got) + ", want " + std::to_string(want));
  }
  cudaFree(x);
  ncclCommDestroy(half);

  ncclComm_t rest = nullptr;
  if (c.ok(ncclCommSplit(c.comm, c.rank == 0 ? NCCL_SPLIT_NOCOLOR : 7, 0, &rest, nullptr), "split without rank 0")) {
    int n = -1;
    if (rest) ncclCommCount(rest, &n);
    c.report->check(c.rank == 0 ? rest == nullptr : n == c.size - 1,
                    "split without rank 0: " + std::string(rest ? std::to_string(n) + " ranks" : "no communicator"));
  }
  ncclCommDestroy(rest);
}

// Calls every rank gets wrong alike: each must fail at once with a message.
void misuse(Ctx& c) {
  std::vector<float> host(8);
  float* dev = device_alloc<float>(8);
  auto expect = [&](ncclResult_t r, ncclResult_t want, const std::string& what, const std::string& words) {
    const std::string detail = ncclGetLastError(c.comm);
    c.report->check(r == want && detail.find(words) != std::string::npos,
                    what + ": got " + ncclGetErrorString(r) + " '" + detail + "', want " + ncclGetErrorString(want) +
                        " naming '" + words + "'");
  };
  expect(ncclAllReduce(host.data(), dev, 8, ncclFloat32, ncclSum, c.comm, c.stream), ncclInvalidArgument,
         "host sendbuff", "not inside one device allocation");
  expect(ncclAllReduce(dev, dev, 8, ncclFloat32, ncclMax, c.comm, c.stream), ncclInvalidArgument, "ncclMax",
         "ncclSum only");
  expect(ncclAllReduce(dev, dev, 8, ncclInt32, ncclSum, c.comm, c.stream), ncclInvalidArgument, "int32 sum",
         "only f32, f16 and bf16");
  expect(ncclSend(dev, 8, ncclFloat32, c.size, c.comm, c.stream), ncclInvalidArgument, "peer out of range",
         "peer " + std::to_string(c.size) + " is not a rank");
  expect(ncclBroadcast(dev, dev, 8, ncclFloat32, -1, c.comm, c.stream), ncclInvalidArgument, "root -1", "root -1");
  expect(ncclAllGather(reinterpret_cast<uint8_t*>(dev) + 1, dev, 4, ncclUint8, c.comm, c.stream), ncclInvalidArgument,
         "all_gather overlap", "overlaps recvbuff");
  // A group with a failed call fails at ncclGroupEnd and runs none of it.
  ncclGroupStart();
  ncclSend(dev, 8, ncclFloat32, (c.rank + 1) % c.size, c.comm, c.stream);
  ncclSend(host.data(), 8, ncclFloat32, (c.rank + 1) % c.size, c.comm, c.stream);
  c.report->check(ncclGroupEnd() == ncclInvalidArgument, "a group with a failed call did not fail at ncclGroupEnd");
  c.report->check(ncclGroupEnd() == ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart did not fail");
  c.report->check(std::string(ncclGetErrorString(ncclRemoteError)) != ncclGetErrorString(ncclSuccess),
                  "ncclGetErrorString names no difference");
  cudaFree(dev);
}

// Every rank asks for rank 0 of a new id: all must fail, none may wait.
void init_misuse(Ctx& c) {
  if (c.size < 2) return;
  ncclUniqueId id{};
  if (c.rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t bad = nullptr;
  const ncclResult_t r = ncclCommInitRank(&bad, c.size, id, 0);
  const std::string detail = ncclGetLastError(nullptr);
  const std::string words = c.rank == 0 ? "asked for rank 0, taken" : "disagree";
  c.report->check(r == ncclInvalidUsage && bad == nullptr && detail.find(words) != std::string::npos,
                  "two ranks asking for rank 0: " + std::string(ncclGetErrorString(r)) + " '" + detail + "'");
  ncclCommDestroy(bad);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  Ctx c;
  MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c.size);
  Report report(c.rank);
  c.report = &report;

  // The id is made by the last rank, to show the maker need not be rank 0.
  ncclUniqueId id{};
  if (c.rank == c.size - 1) report.check(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
  MPI_Bcast(&id, sizeof id, MPI_BYTE, c.size - 1, MPI_COMM_WORLD);
  if (c.ok(ncclCommInitRank(&c.comm, c.size, id, c.rank), "ncclCommInitRank")) {
    int count = 0, rank = -1;
    ncclCommCount(c.comm, &count);
    ncclCommUserRank(c.comm, &rank);
    report.check(count == c.size && rank == c.rank, "ncclCommCount/UserRank disagree with MPI");
    cudaStreamCreate(&c.stream);
    for (bool in_place : {false, true}) {
      all_reduce_f32(c, 1, in_place);
      all_reduce_f32(c, 1001, in_place);
      all_reduce_16(c, ncclFloat16, 517, in_place);
      all_reduce_16(c, ncclBfloat16, 517, in_place);
      all_gather(c, 37, in_place);
      broadcast(c, c.size - 1, in_place);
    }
    all_reduce_16(c, ncclFloat16, 2, false);  // fewer elements than ranks: empty chunks
    stream_order(c);
    send_recv_ring(c, true);
    send_recv_ring(c, false);
    split(c);
    misuse(c);
    init_misuse(c);
    cudaStreamDestroy(c.stream);
    report.check(ncclCommDestroy(c.comm) == ncclSuccess, "ncclCommDestroy");
  }

  report.print();
  int failures = report.num_failures(), total = 0;
  MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (c.rank == 0) std::printf("simulated NCCL on %d ranks: %d failure(s)\n", c.size, total);
  MPI_Finalize();
  return c.rank == 0 && total > 0 ? 1 : 0;
}
