// All-reduce (sum, f32) through a communicator plugin against MPI's own
// MPI_Allreduce (in place) on the same ranks, sizes and run: median latency,
// bus bandwidth and the ratio plugin / MPI. comm.mpi hands every call to its
// one MPI thread and waits for it; the ratio shows what that costs. A third
// column times MPI_Iallreduce + MPI_Wait from this thread, the nonblocking
// collective comm.mpi's thread starts (and polls, to probe its peers), so the
// hand-off and the collective's algorithm can be told apart.
//
//   mpirun --oversubscribe --bind-to none -np 2 build/bin/bench_comm_allreduce [plugin=comm.mpi] [rounds=7]
//
// Sizes in floats: 768 and 2048 are one decode row of llama-110m's and
// TinyLlama's hidden state (what a layer all-reduces per token, twice); 16Ki
// is 8 TinyLlama rows; 96Ki a 128-token prefill of llama-110m; 256Ki and
// 1Mi (4 MiB) a 128- and a 512-token prefill of TinyLlama. Each round times
// a burst of calls of each kind (which goes first rotates), and every
// result is checked against the sum the ranks' values must give.
// Bus bandwidth is NCCL's: bytes / time x 2 (n - 1) / n, what each link of
// a ring carries.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/communicator.hpp"
#include "core/error.hpp"
#include "core/plugin_loader.hpp"

using namespace llmk;

namespace {

enum Method { kPlugin = 0, kBlocking = 1, kNonblocking = 2 };

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Each rank contributes rank + 1 at every index, plus a ramp every rank
// shares: the sum is exact in f32 for the sizes here.
void fill(std::vector<float>& data, int rank) {
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(rank + 1) + static_cast<float>(i % 64);
}

bool summed(const std::vector<float>& data, int size) {
  const float ranks = static_cast<float>(size * (size + 1) / 2);
  for (size_t i = 0; i < data.size(); ++i)
    if (data[i] != ranks + static_cast<float>(size) * static_cast<float>(i % 64)) return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string plugin = argc > 1 ? argv[1] : "comm.mpi";
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 7;

  // This program calls MPI from its main thread while the plugin calls it
  // from its own: MPI must be started for that before the plugin loads.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "bench_comm_allreduce: this MPI gives no MPI_THREAD_MULTIPLE\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Comm raw;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  int rank = 0, size = 1;
  MPI_Comm_rank(raw, &rank);
  MPI_Comm_size(raw, &size);

  int status = 0;
  {
    PluginRegistry registry;
    std::shared_ptr<Communicator> world;
    try {
      world = Communicator::world(registry.load(plugin, LLMK_PLUGIN_COMM), host_comm_desc(60.0));
    } catch (const Error& e) {
      std::fprintf(stderr, "bench_comm_allreduce: %s\n", e.what());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 0) {
      std::printf("all-reduce, f32 sum, %d ranks: %s against MPI_Allreduce (MPI_IN_PLACE), same run;\n", size,
                  plugin.c_str());
      std::printf("median over %d rounds of the mean time per call in a burst (rank 0's clock); ratio = %s / "
                  "MPI_Allreduce\n\n",
                  rounds, plugin.c_str());
      std::printf("%9s %10s %6s | %12s %12s %12s | %13s %9s | %7s %10s\n", "floats", "bytes", "calls", plugin.c_str(),
                  "Allreduce", "Iallreduce", (plugin + " GB/s").c_str(), "MPI GB/s", "ratio", "Iall/MPI");
    }
    const double bus_factor = size > 1 ? 2.0 * (size - 1) / size : 1.0;
    for (size_t n : {size_t{768}, size_t{2048}, size_t{16384}, size_t{98304}, size_t{262144}, size_t{1048576}}) {
      const double bytes = static_cast<double>(n) * sizeof(float);
      // About 32 MiB per burst, at least 10 and at most 2000 calls.
      const int calls = static_cast<int>(std::clamp(32.0 * 1024 * 1024 / bytes, 10.0, 2000.0));
      std::vector<float> data(n);
      std::vector<double> seconds[3];  // per round: kPlugin, kBlocking, kNonblocking
      bool correct = true;
      for (int round = 0; round < rounds + 1; ++round) {  // round 0 warms up
        for (int turn = 0; turn < 3; ++turn) {
          const int method = (turn + round) % 3;  // each kind first in turn
          double total = 0;
          for (int c = 0; c < calls; ++c) {
            fill(data, rank);
            MPI_Barrier(raw);
            const auto t0 = std::chrono::steady_clock::now();
            if (method == kPlugin) {
              world->all_reduce(data.data(), n);
            } else if (method == kBlocking) {
              MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, raw);
            } else {
              MPI_Request request;
              MPI_Iallreduce(MPI_IN_PLACE, data.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, raw, &request);
              MPI_Wait(&request, MPI_STATUS_IGNORE);
            }
            total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (c == 0) correct = correct && summed(data, size);
          }
          if (round > 0) seconds[method].push_back(total / calls);
        }
      }
      int all_correct = correct ? 1 : 0;
      MPI_Allreduce(MPI_IN_PLACE, &all_correct, 1, MPI_INT, MPI_MIN, raw);
      if (all_correct == 0) status = 1;
      if (rank == 0) {
        const double p = median(seconds[kPlugin]), m = median(seconds[kBlocking]), i = median(seconds[kNonblocking]);
        std::printf("%9zu %10.0f %6d | %9.1f us %9.1f us %9.1f us | %13.3f %9.3f | %7.2f %10.2f%s\n", n, bytes, calls,
                    p * 1e6, m * 1e6, i * 1e6, bytes / p * bus_factor / 1e9, bytes / m * bus_factor / 1e9, p / m,
                    i / m, all_correct != 0 ? "" : "  WRONG SUMS");
        std::fflush(stdout);
      }
    }
    MPI_Comm_free(&raw);
  }
  // The plugin ends MPI when its last communicator goes (above); end it here otherwise.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized == 0) MPI_Finalize();
  return status;
}
