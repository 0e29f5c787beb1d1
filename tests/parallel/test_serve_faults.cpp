// llmk serve as a job of 2 ranks under mpirun when a rank is lost: the
// requests in flight are answered 503 with an error naming the rank, and
// rank 0 ends the job with a non-zero code (for a supervisor or a router
// to restart it), within parallel.timeout_s plus the probe window.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <signal.h>

#include <cstdlib>
#include <future>
#include <string>
#include <vector>

#include "ipc/serve_process.hpp"

using namespace llmk::test;
using nlohmann::json;

namespace {

HttpResult complete(int port) {
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 100}, {"temperature", 0}, {"ignore_eos", true}};
  return curl(port, "POST", "/v1/completions", body.dump());
}

}  // namespace

TEST_CASE("a stopped rank: requests in flight get 503 naming it, and the job ends non-zero", "[parallel][faults]") {
  setenv("LLMK_TEST_SERVE_RANKS", "2", 1);
  unsetenv("LLMK_TEST_MPIRUN_OPTIONS");
  ServeProcess serve({"--set", "parallel.timeout_s=2"});
  REQUIRE(serve.wait_ready());
  REQUIRE(complete(serve.http_port()).status == 200);  // serving at tensor 2
  const pid_t worker = serve.rank_pid(1);
  REQUIRE(worker != 0);
  ::kill(worker, SIGSTOP);
  const auto started = std::chrono::steady_clock::now();
  auto first = std::async(std::launch::async, [&] { return complete(serve.http_port()); });
  auto second = std::async(std::launch::async, [&] { return complete(serve.http_port()); });
  for (HttpResult r : {first.get(), second.get()}) {
    INFO(r.body << "\n" << serve.log());
    CHECK(r.status == 503);
    CHECK_THAT(r.body, Catch::Contains("rank 1 did not answer"));
  }
  const double answered_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const int status = serve.wait_exit(std::chrono::seconds(30));
  INFO(serve.log());
  CHECK(status != 0);
  CHECK(status != -1);  // it exited
  CHECK_THAT(serve.log(), Catch::Contains("parallel job failed"));
  // timeout 2 s + the probe window (3 s) + the step that noticed it.
  CHECK(answered_s < 15);
}

TEST_CASE("a killed rank, mpirun told to leave the job to rank 0: 503 naming it, then a non-zero exit",
          "[parallel][faults]") {
  // Open MPI ends a job at once when a rank dies, unless
  // orte_abort_on_non_zero_status is 0: then rank 0 finds the lost rank
  // (parallel.timeout_s), answers what it holds with 503 and ends the job.
  setenv("LLMK_TEST_SERVE_RANKS", "2", 1);
  setenv("LLMK_TEST_MPIRUN_OPTIONS", "--mca orte_abort_on_non_zero_status 0", 1);
  ServeProcess serve({"--set", "parallel.timeout_s=2"});
  REQUIRE(serve.wait_ready());
  REQUIRE(complete(serve.http_port()).status == 200);
  const pid_t worker = serve.rank_pid(1);
  REQUIRE(worker != 0);
  ::kill(worker, SIGKILL);
  const HttpResult r = complete(serve.http_port());
  INFO(r.body << "\n" << serve.log());
  CHECK(r.status == 503);
  CHECK_THAT(r.body, Catch::Contains("rank 1 did not answer"));
  const int status = serve.wait_exit(std::chrono::seconds(30));
  CHECK(status != 0);
  CHECK(status != -1);
}

TEST_CASE("a killed rank under mpirun's defaults: the job ends at once, mpirun naming the rank", "[parallel][faults]") {
  setenv("LLMK_TEST_SERVE_RANKS", "2", 1);
  unsetenv("LLMK_TEST_MPIRUN_OPTIONS");
  ServeProcess serve({"--set", "parallel.timeout_s=2"});
  REQUIRE(serve.wait_ready());
  const pid_t worker = serve.rank_pid(1);
  REQUIRE(worker != 0);
  ::kill(worker, SIGKILL);
  const int status = serve.wait_exit(std::chrono::seconds(30));
  INFO(serve.log());
  CHECK(status != 0);
  CHECK(status != -1);
  CHECK_THAT(serve.log(), Catch::Contains("rank 1"));
}
