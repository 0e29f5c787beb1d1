// llmk: one command, many subcommands (see `llmk --help`).
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <exception>
#include <iostream>
#include <vector>

#include "apps/command.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"

namespace llmk::app {
namespace {

struct Entry {
  std::string name;
  std::string description;
  CommandSetup setup;
};

std::vector<Entry>& registry() {
  static std::vector<Entry> entries;
  return entries;
}

}  // namespace

CommandRegistration::CommandRegistration(std::string name, std::string description, CommandSetup setup) {
  registry().push_back({std::move(name), std::move(description), std::move(setup)});
}

}  // namespace llmk::app

int main(int argc, char** argv) {
  // Logs go to stderr; stdout carries only what a command produces.
  spdlog::set_default_logger(spdlog::stderr_color_mt("llmk"));
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");

  CLI::App app{"llmk: a Llama inference-serving engine"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")->capture_default_str();

  std::vector<std::pair<CLI::App*, std::function<int()>>> runners;
  for (auto& entry : llmk::app::registry()) {
    CLI::App* sub = app.add_subcommand(entry.name, entry.description);
    runners.emplace_back(sub, entry.setup(*sub));
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  spdlog::set_level(spdlog::level::from_str(log_level));

  // A rank of a parallel job that fails ends the whole job (the others would
  // wait for it); one that finishes leaves it, which shuts the transport down.
  auto failed = [](const char* what) {
    spdlog::error("{}", what);
    if (auto job = llmk::ParallelJob::current()) job->abort_job(1);
    return 1;
  };
  try {
    for (auto& [sub, run] : runners) {
      if (sub->parsed()) {
        const int code = run();
        // A failed job cannot shut MPI down in order (its peers are gone): it ends.
        if (auto job = llmk::ParallelJob::current(); job && job->failed()) job->abort_job(code != 0 ? code : 1);
        llmk::ParallelJob::leave();
        return code;
      }
    }
  } catch (const llmk::Error& e) {
    return failed(e.what());
  } catch (const std::exception& e) {
    return failed(e.what());
  }
  return 0;
}
