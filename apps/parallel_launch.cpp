#include "apps/parallel_launch.hpp"

#include <spdlog/spdlog.h>

#include <csignal>
#include <filesystem>
#include <vector>

#include "actors/built_executors.hpp"
#include "core/checkpoint.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/parallel_executor.hpp"
#include "core/plugin_loader.hpp"

namespace llmk::app {

std::optional<int> serve_steps_unless_rank0(const EngineConfig& config) {
  const uint64_t ranks = static_cast<uint64_t>(config.parallel.tensor) * config.parallel.pipeline;
  if (ranks == 1) {
    if (launched_ranks() > 1)
      throw Error(ErrorCode::invalid_config,
                  "this process is one of " + std::to_string(launched_ranks()) +
                      " ranks, but parallel.tensor x parallel.pipeline = 1: set them to split the model over the "
                      "ranks (e.g. --set parallel.tensor=" + std::to_string(launched_ranks()) + ")");
    return std::nullopt;
  }
  std::vector<std::filesystem::path> search_path(config.plugins.search_path.begin(), config.plugins.search_path.end());
  PluginRegistry registry(search_path);
  std::shared_ptr<ParallelJob> job = ParallelJob::join(config, registry);
  if (job->rank() == 0) return std::nullopt;
  // Signals are rank 0's: it drains and stops the job (mpirun forwards
  // SIGINT and SIGTERM to every rank).
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGTERM, SIG_IGN);
  register_built_executors();  // rank 0's engine registers them; this rank builds its shard here
  const int code = serve_parallel_steps(config, open_model(config.model), registry, job);
  ParallelJob::leave();
  return code;
}

bool parallel_job_failed() {
  const std::shared_ptr<ParallelJob> job = ParallelJob::current();
  return job && job->failed();
}

void end_failed_job() {
  const std::shared_ptr<ParallelJob> job = ParallelJob::current();
  if (!job) std::exit(1);
  spdlog::error("parallel: ending the job: {}", job->failure());
  job->abort_job(1);
}

}  // namespace llmk::app
