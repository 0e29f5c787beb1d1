// A communicator plugin under mpirun -np 2 when a rank stops answering:
// rank 1 stops (SIGSTOP) after a barrier; rank 0's next call must fail with
// peer_lost naming rank 1 within the timeout plus the probe window, and
// then ends the job (abort(3)).
//
//   mpirun -np 2 comm_check comm.mpi stop
//
// The collectives themselves are the comm conformance suite's
// (conformance/comm_suite.cpp: `mpirun -np N llmk plugins --conformance FILE`).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "core/communicator.hpp"
#include "core/error.hpp"
#include "core/plugin_loader.hpp"

using namespace llmk;

int main(int argc, char** argv) {
  const std::string plugin = argc > 1 ? argv[1] : "comm.mpi";
  const std::string mode = argc > 2 ? argv[2] : "";
  if (mode != "stop") {
    std::fprintf(stderr, "usage: comm_check PLUGIN stop\n");
    return 2;
  }
  PluginRegistry registry;
  const llmk_comm_desc desc = host_comm_desc(2.0);
  auto world = Communicator::world(registry.load(plugin, LLMK_PLUGIN_COMM), desc);
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
