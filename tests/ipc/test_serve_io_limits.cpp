// `llmk serve`'s HTTP I/O limits come from config: server.io_timeout_s cuts
// a stalled client off, server.poll_max_finished and server.poll_keep_s
// bound the polled results kept. Each test sets a value far from the
// default, so a key that did not reach the server fails it.
#ifdef LLMK_HAVE_ENGINE

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "serve_process.hpp"
#include "support.hpp"

using namespace llmk;
using llmk::test::closed_by_server;
using llmk::test::connect_to;
using llmk::test::curl;
using llmk::test::ServeProcess;
using nlohmann::json;

namespace {

// Submits a polled completion and fetches until it is done; its id.
std::string poll_to_end(int port, const std::string& prompt) {
  const auto submitted =
      curl(port, "POST", "/v1/poll/completions", json({{"prompt", prompt}, {"max_tokens", 4}}).dump());
  REQUIRE(submitted.status == 202);
  const std::string id = submitted.json()["id"];
  size_t next = 0;
  for (int fetch = 0; fetch < 100; ++fetch) {
    const auto r = curl(port, "GET", "/v1/poll/" + id + "?from=" + std::to_string(next) + "&wait=5");
    REQUIRE(r.status == 200);
    if (r.json()["done"] == true) return id;
    next = r.json()["next"];
  }
  FAIL("polled request " << id << " never finished");
  return id;
}

}  // namespace

TEST_CASE("llmk serve closes a connection stalled mid-request after server.io_timeout_s", "[serve][stall]") {
  // The default (30 s) would keep it open past the 15 s this test waits.
  ServeProcess serve({"--set", "server.io_timeout_s=0.5"});
  REQUIRE(serve.wait_ready());
  const int fd = connect_to(serve.http_port());
  const std::string half = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\"";
  REQUIRE(::send(fd, half.data(), half.size(), 0) == static_cast<ssize_t>(half.size()));
  INFO(serve.log());
  CHECK(closed_by_server(fd, std::chrono::seconds(15)));
  ::close(fd);
  CHECK(curl(serve.http_port(), "GET", "/health").status == 200);
}

TEST_CASE("llmk serve keeps at most server.poll_max_finished finished polled results and drops the oldest",
          "[serve][poll]") {
  ServeProcess serve({"--set", "server.poll_max_finished=1"});
  REQUIRE(serve.wait_ready());
  const std::string first = poll_to_end(serve.http_port(), "Once upon a time");
  const std::string second = poll_to_end(serve.http_port(), "The little dog");
  INFO(serve.log());
  // A fetch drops what is over the limit first: the older result is gone.
  CHECK(curl(serve.http_port(), "GET", "/v1/poll/" + first).status == 404);
  const auto kept = curl(serve.http_port(), "GET", "/v1/poll/" + second);
  CHECK(kept.status == 200);
  CHECK(kept.json()["done"] == true);
}

TEST_CASE("llmk serve forgets a finished polled result after server.poll_keep_s", "[serve][poll]") {
  ServeProcess serve({"--set", "server.poll_keep_s=0.5"});
  REQUIRE(serve.wait_ready());
  const std::string id = poll_to_end(serve.http_port(), "Once upon a time");
  std::this_thread::sleep_for(std::chrono::seconds(2));
  INFO(serve.log());
  // The default keeps it 300 s.
  const auto r = curl(serve.http_port(), "GET", "/v1/poll/" + id);
  CHECK(r.status == 404);
  CHECK(r.json()["error"]["code"] == "not_found");
}

#endif  // LLMK_HAVE_ENGINE
