// Catch2 under mpirun: rank 0 runs the test cases; every other rank serves
// them. A test case opens a ParallelRun for a configuration: the harness
// sends the configuration to the other ranks, which join a job of that
// layout and serve rank 0's steps (serve_parallel_steps, as in
// production) until rank 0's executor stops them; then the next case.
//
// The harness holds a world communicator of its own for the whole program,
// so jobs of different layouts come and go over one MPI session.
#pragma once

#include <memory>
#include <string>

#include "core/checkpoint.hpp"
#include "core/communicator.hpp"
#include "core/config.hpp"
#include "core/executor.hpp"
#include "core/parallel.hpp"
#include "core/plugin_loader.hpp"

namespace llmk::test {

// The program's own world (rank, size) and plugin registry.
Communicator& harness_world();
PluginRegistry& harness_plugins();

// Rank 0 only. One job of cfg's layout for the life of this object; the
// other ranks serve it. executor(): rank 0's (make_executor), built on
// first use; a program that builds an Engine instead lets the Engine's
// make_executor join the same job.
class ParallelRun {
 public:
  explicit ParallelRun(const EngineConfig& cfg);
  ~ParallelRun();
  ParallelRun(const ParallelRun&) = delete;
  ParallelRun& operator=(const ParallelRun&) = delete;
  Executor& executor(std::shared_ptr<const Checkpoint> checkpoint);
  void release_executor() { executor_.reset(); }

 private:
  EngineConfig cfg_;
  std::unique_ptr<Executor> executor_;
};

// The layouts (tensor, pipeline) this world size runs: every factorization.
std::vector<std::pair<uint32_t, uint32_t>> layouts_for(int32_t world_size);

}  // namespace llmk::test
