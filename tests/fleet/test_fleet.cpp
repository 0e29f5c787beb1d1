// llmk replicas behind the routers users deploy (sglang-router, vllm-router
// from PyPI, installed into the project venv by scripts/setup.sh): the
// checks live in fleet_check.py, which starts `llmk serve` replicas on the
// stories260K model and the router as processes on loopback. A case skips
// when the venv or its router is absent.
#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "support/command.hpp"
#include "support/model_cache.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"

using llmk::test::CommandResult;
using llmk::test::run_command;

namespace {

CommandResult run(const std::string& command) {
  CommandResult r = run_command(command + " 2>&1");
  std::printf("%s", r.out.c_str());  // the figures, in CTest's log
  return r;
}

bool have_module(const std::string& module) {
  return run(llmk::test::venv_python() + " -c 'import " + module + "'").status == 0;
}

CommandResult fleet_check(const std::string& which, const std::string& model = LLMK_SHARED_DIR "/models/stories260K") {
  return run(llmk::test::venv_python() + " " LLMK_SOURCE_DIR "/tests/fleet/fleet_check.py " + which +
             " --llmk " LLMK_BINARY_DIR "/bin/llmk --model " + model);
}

}  // namespace

TEST_CASE("Three replicas behind sglang-router's cache_aware policy answer 300 requests with their own greedy text",
          "[fleet]") {
  if (!llmk::test::have_venv_python() || !have_module("sglang_router")) {
    LLMK_SKIP("sglang-router is not installed in the project venv (scripts/setup.sh installs it)");
  }
  const CommandResult r = fleet_check("sglang-cache-aware");
  INFO(r.out);
  CHECK(r.status == 0);
}

TEST_CASE("Three replicas behind vllm-router pass its start-up probes and answer correctly", "[fleet]") {
  if (!llmk::test::have_venv_python() || !have_module("vllm_router")) {
    LLMK_SKIP("vllm-router is not installed in the project venv (scripts/setup.sh installs it)");
  }
  const CommandResult r = fleet_check("vllm-smoke");
  INFO(r.out);
  CHECK(r.status == 0);
}

TEST_CASE("A replica killed mid-run fails only its in-flight requests, and rejoins when restarted", "[fleet]") {
  if (!llmk::test::have_venv_python() || !have_module("sglang_router")) {
    LLMK_SKIP("sglang-router is not installed in the project venv (scripts/setup.sh installs it)");
  }
  const CommandResult r = fleet_check("failover");
  INFO(r.out);
  CHECK(r.status == 0);
}

TEST_CASE("A replica drained by SIGTERM mid-run behind sglang-router costs no client a request and exits 0",
          "[fleet]") {
  if (!llmk::test::have_venv_python() || !have_module("sglang_router")) {
    LLMK_SKIP("sglang-router is not installed in the project venv (scripts/setup.sh installs it)");
  }
  const CommandResult r = fleet_check("drain");
  INFO(r.out);
  CHECK(r.status == 0);
}

TEST_CASE("A chat through either router answers what the replica answers directly", "[fleet]") {
  if (!llmk::test::have_venv_python() || !have_module("sglang_router") || !have_module("vllm_router")) {
    LLMK_SKIP("sglang-router or vllm-router is not installed in the project venv (scripts/setup.sh installs them)");
  }
  if (!std::filesystem::is_regular_file(llmk::test::smollm2_file())) {
    LLMK_SKIP("no SmolLM2 chat model in the model cache (scripts/setup.sh downloads it)");
  }
  const CommandResult r = fleet_check("chat", llmk::test::smollm2_file().string());
  INFO(r.out);
  CHECK(r.status == 0);
}

TEST_CASE("A prefill and a decode replica behind sglang-router's disaggregation answer what one replica answers",
          "[fleet][disaggregation]") {
  if (!llmk::test::have_venv_python() || !have_module("sglang_router")) {
    LLMK_SKIP("sglang-router is not installed in the project venv (scripts/setup.sh installs it)");
  }
  const CommandResult r = fleet_check("pd");
  INFO(r.out);
  CHECK(r.status == 0);
}

TEST_CASE("A disaggregated pair of tensor-parallel replicas (2 ranks each, mpirun) answers what one replica answers",
          "[fleet][disaggregation][parallel]") {
  if (!llmk::test::have_venv_python() || !have_module("sglang_router")) {
    LLMK_SKIP("sglang-router is not installed in the project venv (scripts/setup.sh installs it)");
  }
  if (run("command -v mpirun").status != 0) LLMK_SKIP("no mpirun on PATH (scripts/setup.sh installs Open MPI)");
  const CommandResult r = fleet_check("pd-tensor");
  INFO(r.out);
  CHECK(r.status == 0);
}
