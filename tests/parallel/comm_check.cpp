// Checks a communicator plugin under mpirun (any number of ranks) against
// values computed here independently: every rank knows what every other
// rank contributes, so each result has an exact or float64 expectation.
//
//   mpirun -np 3 comm_check comm.mpi            the collectives
//   mpirun -np 2 comm_check comm.mpi stop        rank 1 stops (SIGSTOP); rank 0's
//                                               call must fail naming it, then abort(3)
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/communicator.hpp"
#include "core/error.hpp"
#include "core/plugin_loader.hpp"
#include "tests/parallel/rank_check.hpp"

using namespace llmk;

namespace {

float value(int rank, size_t i) { return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + rank) * (1 + rank)); }

uint16_t to_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

void check_collectives(Communicator& world, test::RankCheck& check) {
  const int rank = world.rank(), size = world.size();
  // all_reduce f32, out of place and in place, small and large.
  for (size_t n : {size_t{1}, size_t{768}, size_t{300000}}) {
    std::vector<float> mine(n), out(n, -1.f);
    for (size_t i = 0; i < n; ++i) mine[i] = value(rank, i);
    world.all_reduce(mine.data(), out.data(), n, DType::f32);
    world.all_reduce(mine.data(), n);
    double worst = 0;
    for (size_t i = 0; i < n; ++i) {
      double want = 0, scale = 0;
      for (int r = 0; r < size; ++r) {
        want += value(r, i);
        scale += std::fabs(value(r, i));
      }
      worst = std::max({worst, std::fabs(out[i] - want) / (scale + 1e-30), std::fabs(mine[i] - want) / (scale + 1e-30)});
    }
    check.expect(worst <= size * 6e-8, "all_reduce f32 of " + std::to_string(n) + ": error " + std::to_string(worst));
  }
  // all_reduce bf16 and f16: each step of the reduction rounds once, so the
  // error is at most one rounding per rank of the largest partial sum.
  {
    const size_t n = 1000;
    std::vector<uint16_t> bf(n), hf(n);
    for (size_t i = 0; i < n; ++i) {
      bf[i] = to_bf16(value(rank, i));
      const _Float16 h = static_cast<_Float16>(value(rank, i));
      std::memcpy(&hf[i], &h, 2);
    }
    world.all_reduce(bf.data(), bf.data(), n, DType::bf16);
    world.all_reduce(hf.data(), hf.data(), n, DType::f16);
    double worst_bf = 0, worst_hf = 0;
    for (size_t i = 0; i < n; ++i) {
      double want_bf = 0, want_hf = 0, scale = 0;
      for (int r = 0; r < size; ++r) {
        want_bf += from_bf16(to_bf16(value(r, i)));
        want_hf += static_cast<float>(static_cast<_Float16>(value(r, i)));
        scale += std::fabs(value(r, i));
      }
      _Float16 got_h;
      std::memcpy(&got_h, &hf[i], 2);
      worst_bf = std::max(worst_bf, std::fabs(from_bf16(bf[i]) - want_bf) / (scale + 1e-30));
      worst_hf = std::max(worst_hf, std::fabs(static_cast<float>(got_h) - want_hf) / (scale + 1e-30));
    }
    check.expect(worst_bf <= (size - 1) * std::ldexp(1.0, -8) + 1e-12, "all_reduce bf16 error " + std::to_string(worst_bf));
    check.expect(worst_hf <= (size - 1) * std::ldexp(1.0, -11) + 1e-12, "all_reduce f16 error " + std::to_string(worst_hf));
  }
  // all_gather: rank r's ints in slot r, exactly; and in place.
  {
    const size_t n = 5;
    std::vector<int32_t> mine(n), all(n * size, -1);
    for (size_t i = 0; i < n; ++i) mine[i] = rank * 100 + static_cast<int32_t>(i);
    world.all_gather(mine.data(), all.data(), n, DType::i32);
    bool ok = true;
    for (int r = 0; r < size; ++r)
      for (size_t i = 0; i < n; ++i) ok = ok && all[r * n + i] == r * 100 + static_cast<int32_t>(i);
    check.expect(ok, "all_gather of i32");
    std::vector<int32_t> in_place(n * size, -1);
    std::memcpy(in_place.data() + rank * n, mine.data(), n * 4);
    world.all_gather(in_place.data() + rank * n, in_place.data(), n, DType::i32);
    check.expect(in_place == all, "all_gather in place");
  }
  // broadcast from the last rank.
  {
    std::vector<uint8_t> bytes(70000);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = rank == size - 1 ? static_cast<uint8_t>(i * 7) : 0;
    world.broadcast(bytes.data(), bytes.size(), DType::u8, size - 1);
    bool ok = true;
    for (size_t i = 0; i < bytes.size(); ++i) ok = ok && bytes[i] == static_cast<uint8_t>(i * 7);
    check.expect(ok, "broadcast of 70000 bytes from rank " + std::to_string(size - 1));
  }
  // A ring exchange in one group: everybody sends first, with no deadlock.
  if (size > 1) {
    std::vector<float> out(1000), in(1000, -1);
    for (size_t i = 0; i < out.size(); ++i) out[i] = value(rank, i);
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    world.group_start();
    world.send(out.data(), out.size(), DType::f32, next);
    world.recv(in.data(), in.size(), DType::f32, prev);
    world.group_end();
    bool ok = true;
    for (size_t i = 0; i < in.size(); ++i) ok = ok && in[i] == value(prev, i);
    check.expect(ok, "ring send/recv in a group");
  }
  // Split into even and odd ranks; each group sums its own members.
  {
    auto half = world.split(rank % 2, rank);
    float x = static_cast<float>(rank + 1);
    half->all_reduce(&x, 1);
    float want = 0;
    for (int r = rank % 2; r < size; r += 2) want += static_cast<float>(r + 1);
    check.expect(x == want, "split all_reduce: " + std::to_string(x) + " vs " + std::to_string(want));
    check.expect(half->rank() == rank / 2, "split rank " + std::to_string(half->rank()));
    half->barrier();
  }
  world.barrier();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string plugin = argc > 1 ? argv[1] : "comm.mpi";
  const std::string mode = argc > 2 ? argv[2] : "collectives";
  PluginRegistry registry;
  const llmk_comm_desc desc = host_comm_desc(mode == "stop" ? 2.0 : 60.0);
  auto world = Communicator::world(registry.load(plugin, LLMK_PLUGIN_COMM), desc);
  test::RankCheck check(world);
  if (mode == "collectives") {
    check_collectives(*world, check);
    return check.finish(("comm_check " + plugin).c_str());
  }
  // stop: rank 1 freezes after the barrier; rank 0 must be told within the
  // timeout plus the probe window, with rank 1 named, and ends the job.
  world->barrier();
  if (world->rank() == 1) raise(SIGSTOP);
  if (world->rank() == 0) {
    float x = 1;
    try {
      world->all_reduce(&x, 1);
      std::printf("no error: the all_reduce finished without rank 1\n");
    } catch (const Error& e) {
      const std::string what = e.what();
      const bool named = what.find("rank 1 did not answer") != std::string::npos;
      std::printf("%s: %s\n", e.code() == ErrorCode::peer_lost && named ? "PEER_LOST NAMED" : "WRONG ERROR", e.what());
    }
    std::fflush(stdout);
    world->abort(3);
  }
  pause();
  return 0;
}
