// The communicator suite: a comm plugin (plugins/api/llmk_comm.h) joins the
// world of the launch (mpirun -np N, or a world of one started alone) and
// every rank runs the same cases in the same order, on the suite's device
// (host memory, or a CUDA device's with its stream). Every rank knows what
// every other rank contributes (value(rank, i) below), so each result has
// an exact or float64 expectation computed here, not by the plugin. Each
// rank reports its own results: a case fails on the rank that saw it fail,
// and the launch fails when any rank does (mpirun's exit status).
//
// Tolerances: an f32 sum over N ranks rounds at most N - 1 times, each by
// at most u = 2^-24 of the running sum's magnitude, so the error is within
// gamma_(N-1) = (N - 1) u / (1 - (N - 1) u) of sum|x|; bf16 and f16 sums (in
// F32, rounded to the type once per step of the reduction) the same with
// u = 2^-8 and 2^-11. Every other result is exact.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "conformance/comm_cases.hpp"
#include "conformance/suite.hpp"

namespace llmk::conformance {
namespace {

using commtest::Comm;
using commtest::Failure;

double value(int32_t rank, size_t i) { return std::sin(0.37 * static_cast<double>(i) + rank) * (1 + rank); }

// A dtype's storage of value(rank, i), and back to double.
std::vector<uint8_t> encode(uint32_t dtype, int32_t rank, size_t n) {
  std::vector<uint8_t> out(n * commtest::element_bytes(dtype));
  for (size_t i = 0; i < n; ++i) commtest::store(dtype, static_cast<float>(value(rank, i)), out.data(), i);
  return out;
}

// The most `steps` roundings of relative size `unit` move a sum, relative
// to the sum of magnitudes: gamma_k = k u / (1 - k u) (Higham).
double bound(int32_t steps, double unit) {
  const double k = std::max(steps, 0);
  return k * unit / (1 - k * unit) + 1e-12;
}

// The all-reduce cases: every dtype, in place and not, sizes 0, 1, odd and large.
void all_reduce_cases(Comm& comm, commtest::Cases& cases, size_t large) {
  const int32_t n_ranks = comm.size();
  struct Type {
    uint32_t dtype;
    const char* name;
    double unit;  // the rounding of one step of the reduction, relative
  };
  for (const Type t :
       {Type{LLMK_DTYPE_F32, "f32", std::ldexp(1.0, -24)}, Type{LLMK_DTYPE_BF16, "bf16", std::ldexp(1.0, -8)},
        Type{LLMK_DTYPE_F16, "f16", std::ldexp(1.0, -11)}}) {
    for (const size_t n : {size_t{0}, size_t{1}, size_t{1001}, large}) {
      for (const bool in_place : {false, true}) {
        const std::string name =
            std::string("all_reduce ") + t.name + " of " + std::to_string(n) + (in_place ? ", in place" : "");
        cases.run(name, "error / sum|x|", bound(n_ranks - 1, t.unit), [&] {
          const size_t bytes = commtest::element_bytes(t.dtype);
          // One element more than the count: a sentinel the call must not write.
          std::vector<uint8_t> mine = encode(t.dtype, comm.rank(), n + 1);
          std::vector<uint8_t> sentinel(bytes, 0x5a), out(mine.size());
          std::memcpy(mine.data() + n * bytes, sentinel.data(), bytes);
          DeviceBuffer send(comm.device(), mine);
          DeviceBuffer recv_buffer(comm.device(), in_place ? mine : std::vector<uint8_t>(mine.size(), 0x5a));
          comm.ok(comm.api().all_reduce(comm.self(), in_place ? recv_buffer.data() : send.data(), recv_buffer.data(), n,
                                        t.dtype, LLMK_REDUCE_SUM, comm.queue(), comm.err()),
                  "all_reduce");
          recv_buffer.copy_out(out);
          if (std::memcmp(out.data() + n * bytes, sentinel.data(), bytes) != 0)
            throw Failure("wrote past the " + std::to_string(n) + " elements");
          double worst = 0;
          for (size_t i = 0; i < n; ++i) {
            double want = 0, scale = 0;
            for (int32_t r = 0; r < n_ranks; ++r) {
              const double x = commtest::rounded(t.dtype, static_cast<float>(value(r, i)));
              want += x;
              scale += std::fabs(x);
            }
            worst = std::max(worst, std::fabs(commtest::load(t.dtype, out.data(), i) - want) / (scale + 1e-30));
          }
          return worst;
        });
      }
    }
  }
}

// all_gather: rank r's block at slot r, exactly; and in place.
void all_gather_cases(Comm& comm, commtest::Cases& cases) {
  const int32_t n_ranks = comm.size(), rank = comm.rank();
  for (const size_t n : {size_t{0}, size_t{1}, size_t{1001}}) {
    for (const bool in_place : {false, true}) {
      const std::string name = "all_gather i32 of " + std::to_string(n) + (in_place ? ", in place" : "");
      cases.exact(name, [&] {
        std::vector<int32_t> mine(n), all(n * n_ranks + 1, -7);
        for (size_t i = 0; i < n; ++i) mine[i] = rank * 100000 + static_cast<int32_t>(i);
        if (in_place) std::copy(mine.begin(), mine.end(), all.begin() + static_cast<ptrdiff_t>(n * rank));
        DeviceBuffer send(comm.device(), mine.empty() ? std::vector<int32_t>{-7} : mine);
        DeviceBuffer recv(comm.device(), all);
        const void* from = in_place ? static_cast<const int32_t*>(recv.data()) + n * rank : send.data();
        comm.ok(comm.api().all_gather(comm.self(), from, recv.data(), n, LLMK_DTYPE_I32, comm.queue(), comm.err()),
                "all_gather");
        recv.copy_out(all);
        for (int32_t r = 0; r < n_ranks; ++r)
          for (size_t i = 0; i < n; ++i)
            if (all[r * n + i] != r * 100000 + static_cast<int32_t>(i))
              throw Failure("element " + std::to_string(i) + " of rank " + std::to_string(r) + "'s block is " +
                            std::to_string(all[r * n + i]));
        if (all.back() != -7) throw Failure("wrote past the gathered blocks");
      });
    }
  }
}

// broadcast from every root: an odd number of bytes, and nothing.
void broadcast_cases(Comm& comm, commtest::Cases& cases) {
  for (int32_t root = 0; root < comm.size(); ++root) {
    for (const size_t n : {size_t{0}, size_t{70001}}) {
      cases.exact("broadcast u8 of " + std::to_string(n) + " from rank " + std::to_string(root), [&] {
        std::vector<uint8_t> bytes(n + 1, 0xee);
        for (size_t i = 0; i < n; ++i)
          bytes[i] = comm.rank() == root ? static_cast<uint8_t>(i * 7 + root) : static_cast<uint8_t>(0x11);
        DeviceBuffer buf(comm.device(), bytes);
        comm.ok(comm.api().broadcast(comm.self(), buf.data(), n, LLMK_DTYPE_U8, root, comm.queue(), comm.err()),
                "broadcast");
        buf.copy_out(bytes);
        for (size_t i = 0; i < n; ++i)
          if (bytes[i] != static_cast<uint8_t>(i * 7 + root))
            throw Failure("byte " + std::to_string(i) + " is " + std::to_string(bytes[i]));
        if (bytes[n] != 0xee) throw Failure("wrote past the buffer");
      });
    }
  }
}

// send/recv: pairs (0, 1), (2, 3), ... outside a group, the even rank first
// sending; a ring in one group, everybody sending first; an empty message.
void send_recv_cases(Comm& comm, commtest::Cases& cases) {
  const int32_t n_ranks = comm.size(), rank = comm.rank();
  const char* why = "needs 2 ranks or more (start it under mpirun -np 2)";
  auto message = [](int32_t from, size_t n) {
    std::vector<float> m(n);
    for (size_t i = 0; i < n; ++i) m[i] = static_cast<float>(value(from, i));
    return m;
  };
  auto check = [&](const DeviceBuffer& in, int32_t from, size_t n) {
    std::vector<float> got(n);
    in.copy_out(got);
    if (got != message(from, n)) throw Failure("the message from rank " + std::to_string(from) + " differs");
  };
  cases.exact_or_unsupported("send/recv f32 of 1001 between pairs, ungrouped", n_ranks < 2, why, [&] {
    const int32_t peer = rank % 2 == 0 ? rank + 1 : rank - 1;
    if (peer >= n_ranks) return;  // the odd one out of an odd world
    DeviceBuffer out(comm.device(), message(rank, 1001)), in(comm.device(), std::vector<float>(1001, -1.f));
    auto send = [&] {
      comm.ok(comm.api().send(comm.self(), out.data(), 1001, LLMK_DTYPE_F32, peer, comm.queue(), comm.err()), "send");
    };
    auto recv = [&] {
      comm.ok(comm.api().recv(comm.self(), in.data(), 1001, LLMK_DTYPE_F32, peer, comm.queue(), comm.err()), "recv");
    };
    if (rank % 2 == 0)
      send(), recv();
    else
      recv(), send();
    check(in, peer, 1001);
  });
  for (const size_t n : {size_t{0}, size_t{1001}}) {
    cases.exact_or_unsupported(
        "send/recv f32 of " + std::to_string(n) + " around a ring in one group", n_ranks < 2, why, [&] {
          const int32_t next = (rank + 1) % n_ranks, prev = (rank + n_ranks - 1) % n_ranks;
          DeviceBuffer out(comm.device(), message(rank, n + 1)), in(comm.device(), std::vector<float>(n + 1, -1.f));
          comm.ok(comm.api().group_start(comm.self(), comm.err()), "group_start");
          comm.ok(comm.api().send(comm.self(), out.data(), n, LLMK_DTYPE_F32, next, comm.queue(), comm.err()), "send");
          comm.ok(comm.api().recv(comm.self(), in.data(), n, LLMK_DTYPE_F32, prev, comm.queue(), comm.err()), "recv");
          comm.ok(comm.api().group_end(comm.self(), comm.queue(), comm.err()), "group_end");
          std::vector<float> got(n + 1);
          in.copy_out(got);
          const std::vector<float> want = message(prev, n);
          if (!std::equal(want.begin(), want.end(), got.begin()))
            throw Failure("the message from rank " + std::to_string(prev) + " differs");
          if (got[n] != -1.f) throw Failure("wrote past the message");
        });
  }
}

// split into even and odd ranks, each group summing its own; barrier.
void group_cases(Comm& comm, commtest::Cases& cases) {
  const int32_t n_ranks = comm.size(), rank = comm.rank();
  cases.exact("split by rank parity, then all_reduce within each part", [&] {
    Comm half = comm.split(rank % 2, rank);
    if (half.rank() != rank / 2) throw Failure("rank " + std::to_string(half.rank()) + " in its part");
    DeviceBuffer x(comm.device(), std::vector<float>{static_cast<float>(rank + 1)});
    half.ok(half.api().all_reduce(half.self(), x.data(), x.data(), 1, LLMK_DTYPE_F32, LLMK_REDUCE_SUM, half.queue(),
                                  half.err()),
            "all_reduce");
    std::vector<float> got(1);
    x.copy_out(got);
    float want = 0;
    for (int32_t r = rank % 2; r < n_ranks; r += 2) want += static_cast<float>(r + 1);
    if (got[0] != want) throw Failure(std::to_string(got[0]) + ", not " + std::to_string(want));
  });
  // The last rank enters 300 ms after the others: they cannot leave before
  // it came (at least 100 ms later, a margin for ranks sharing cores).
  cases.exact("barrier waits for the last rank", [&] {
    comm.ok(comm.api().barrier(comm.self(), comm.queue(), comm.err()), "barrier");
    const bool last = rank == n_ranks - 1;
    if (last) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto t = std::chrono::steady_clock::now();
    comm.ok(comm.api().barrier(comm.self(), comm.queue(), comm.err()), "barrier");
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    if (!last && waited < 0.1) throw Failure("left after " + std::to_string(waited) + " s, before the last rank came");
  });
}

}  // namespace

SuiteResult run_comm_suite(const Plugin& plugin, const SuiteOptions& options) {
  SuiteDevice device(options.device);
  SuiteResult result = new_result(plugin, *device);
  commtest::Cases cases(result);
  commtest::api_cases(plugin, *device, cases);
  if (!result.errors.empty()) return result;
  Comm comm;
  try {
    comm = Comm::world(plugin, *device);
  } catch (const std::exception& e) {
    result.errors.push_back(std::string("joining the world: ") + e.what());
    return result;
  }
  result.device += ", rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.size());
  all_reduce_cases(comm, cases, options.reduced ? 65537 : 300007);
  all_gather_cases(comm, cases);
  broadcast_cases(comm, cases);
  send_recv_cases(comm, cases);
  group_cases(comm, cases);
  commtest::bad_argument_cases(comm, cases);
  return result;
}

}  // namespace llmk::conformance
