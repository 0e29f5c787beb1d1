#define CATCH_CONFIG_RUNNER
#include "tests/parallel/parallel_harness.hpp"

#include <catch2/catch.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <vector>

#include "core/error.hpp"
#include "core/parallel_executor.hpp"

namespace llmk::test {

namespace {

std::shared_ptr<Communicator> world_holder;
std::unique_ptr<PluginRegistry> registry_holder;

// A configuration travels as its YAML (to_yaml gives it back exactly).
void send_config(const std::string& yaml) {
  uint64_t bytes = yaml.size();
  harness_world().broadcast(&bytes, 8, DType::u8, 0);
  if (bytes > 0) harness_world().broadcast(const_cast<char*>(yaml.data()), bytes, DType::u8, 0);
}

std::string receive_config() {
  uint64_t bytes = 0;
  harness_world().broadcast(&bytes, 8, DType::u8, 0);
  std::string yaml(bytes, '\0');
  if (bytes > 0) harness_world().broadcast(yaml.data(), bytes, DType::u8, 0);
  return yaml;
}

// The other ranks: one job per configuration rank 0 sends, until an empty one.
void serve_cases() {
  for (;;) {
    const std::string yaml = receive_config();
    if (yaml.empty()) return;
    EngineConfig cfg;
    apply_yaml(cfg, yaml, "rank 0's configuration");
    auto job = ParallelJob::join(cfg, harness_plugins());
    serve_parallel_steps(cfg, open_model(cfg.model), harness_plugins(), job);
    ParallelJob::leave();
  }
}

}  // namespace

Communicator& harness_world() { return *world_holder; }
PluginRegistry& harness_plugins() { return *registry_holder; }

ParallelRun::ParallelRun(const EngineConfig& cfg) : cfg_(cfg) {
  send_config(to_yaml(cfg_));
  ParallelJob::join(cfg_, harness_plugins());
}

ParallelRun::~ParallelRun() {
  executor_.reset();  // tells the other ranks to stop
  ParallelJob::leave();
}

Executor& ParallelRun::executor(std::shared_ptr<const Checkpoint> checkpoint) {
  if (!executor_) executor_ = make_executor(cfg_, std::move(checkpoint), harness_plugins());
  return *executor_;
}

std::vector<std::pair<uint32_t, uint32_t>> layouts_for(int32_t world_size) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (int32_t t = world_size; t >= 1; --t)
    if (world_size % t == 0) out.emplace_back(static_cast<uint32_t>(t), static_cast<uint32_t>(world_size / t));
  return out;
}

}  // namespace llmk::test

int main(int argc, char** argv) {
  using namespace llmk;
  spdlog::set_level(spdlog::level::warn);
  test::registry_holder = std::make_unique<PluginRegistry>();
  test::world_holder =
      Communicator::world(test::registry_holder->load("comm.mpi", LLMK_PLUGIN_COMM), host_comm_desc(120));
  int result = 0;
  if (test::harness_world().rank() == 0) {
    result = Catch::Session().run(argc, argv);
    test::send_config("");  // the other ranks are done
  } else {
    test::serve_cases();
  }
  float code = static_cast<float>(result);
  test::harness_world().broadcast(&code, 1, DType::f32, 0);
  test::world_holder.reset();
  test::registry_holder.reset();
  return static_cast<int>(code);
}
