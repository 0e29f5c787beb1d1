// `llmk bench` against a running `llmk serve` (stories260K) over ZeroMQ and
// over HTTP with SSE: every request completes with its exact output length,
// and the ZeroMQ run reads the server's counters.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "ipc/serve_process.hpp"
#include "render_check.hpp"
#include "support/skip.hpp"

using namespace llmk::test;
namespace fs = std::filesystem;

#if defined(LLMK_BENCH_HAVE_ENGINE) && defined(LLMK_BENCH_HAVE_ZMQ)

namespace {

nlohmann::json run_bench(const std::string& backend_flags, const fs::path& json_file) {
  const std::string cmd = std::string(LLMK_BINARY_DIR) + "/bin/llmk bench " + backend_flags +
                          " --vocab-size 512 -n 24 --input-len 8:64 --output-len 16 --request-rate 200 --seed 5"
                          " --max-concurrency 8 --no-progress --json " + json_file.string() + " 2>&1; echo \"exit=$?\"";
  const std::string out = run_capture(cmd);
  INFO(out);
  REQUIRE(out.find("exit=0") != std::string::npos);
  std::ifstream in(json_file);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("llmk bench measures llmk serve over ZeroMQ and over HTTP", "[serving]") {
  std::string log;
  const auto server = start_ready_server({"--set", "kv_cache.capacity_tokens=8192"}, log);
  INFO(log);
  REQUIRE(server != nullptr);
  const fs::path dir = fs::temp_directory_path() / ("llmk_bench_serving_" + std::to_string(getpid()));
  fs::create_directories(dir);

  const nlohmann::json z = run_bench("--backend zmq --endpoint " + server->zmq_endpoint(), dir / "zmq.json");
  CHECK(z["num_ok"] == 24);
  CHECK(z["num_output_tokens"] == 24 * 16);
  CHECK(z["itl_s"]["count"] == 24 * 15);  // one event per token
  CHECK(z["ttft_s"]["p50"].get<double>() > 0);
  REQUIRE(z.contains("server"));  // counters from the protocol's stats
  CHECK(z["kv_samples"]["rows"].size() > 0);

  const nlohmann::json h = run_bench("--backend http --url 127.0.0.1:" + std::to_string(server->http_port()), dir / "http.json");
  CHECK(h["num_ok"] == 24);
  CHECK(h["num_output_tokens"] == 24 * 16);
  CHECK(h["itl_s"]["count"] == 24 * 15);  // one SSE chunk per token
  CHECK_FALSE(h.contains("server"));
  fs::remove_all(dir);
}

#else

TEST_CASE("llmk bench measures llmk serve over ZeroMQ and over HTTP", "[serving]") {
  LLMK_SKIP("this build lacks llmk_actors or ipc/client.cpp");
}

#endif
