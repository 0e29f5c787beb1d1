// Clients that stall: one that sends half a request and waits, and one that
// stops reading its stream. Each holds a connection thread for at most
// HttpServerOptions::io_timeout; with every thread held, the next client is
// still served once the stalled ones are closed.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ipc/http_server.hpp"
#include "ipc/testing/fake_backend.hpp"
#include "support.hpp"

using namespace llmk;
using namespace llmk::ipc;
using llmk::test::closed_by_server;
using llmk::test::connect_to;
using llmk::test::curl;
using llmk::test::eventually;
using nlohmann::json;

TEST_CASE("A client that sends half a request and stalls is closed after io_timeout, freeing its thread",
          "[http][stall]") {
  FakeBackend backend;
  Metrics metrics;
  // Two connection threads, both taken by stalled clients.
  HttpServer server{backend, metrics,
                    {.address = "127.0.0.1:0", .num_threads = 2, .io_timeout = std::chrono::milliseconds(500)}};
  std::vector<int> stalled;
  for (const std::string& half : {std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le"),
                                  std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
                                              "Content-Type: application/json\r\n\r\n{\"prompt\": \"Hel")}) {
    const int fd = connect_to(server.port());
    REQUIRE(::send(fd, half.data(), half.size(), 0) == static_cast<ssize_t>(half.size()));
    stalled.push_back(fd);
  }
  // The next client is answered: the stalled ones were cut off at their deadline.
  const auto reply = curl(server.port(), "GET", "/health");
  CHECK(reply.status == 200);
  for (int fd : stalled) {
    CHECK(closed_by_server(fd, std::chrono::seconds(30)));
    ::close(fd);
  }
  CHECK(backend.stats().num_running == 0);
}

TEST_CASE("A streaming client that stops reading is closed after io_timeout and its request cancelled",
          "[http][stall]") {
  // Tokens come fast and large: the socket's buffers fill while the client
  // reads nothing, so the server's write blocks until the watchdog cuts it.
  FakeBackend backend(
      {.step_interval = std::chrono::microseconds(20), .max_context = 1 << 20, .kv_capacity_tokens = 1 << 21});
  Metrics metrics;
  HttpServer server{backend, metrics, {.address = "127.0.0.1:0", .io_timeout = std::chrono::milliseconds(500)}};
  const int fd = connect_to(server.port());
  int small = 4096;  // a small receive buffer fills sooner
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  const std::string body =
      json({{"prompt", "long"}, {"max_tokens", 500000}, {"ignore_eos", true}, {"stream", true}}).dump();
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  REQUIRE(::send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size()));
  REQUIRE(eventually([&] { return backend.stats().num_running == 1; }, std::chrono::seconds(30)));
  // Never read: the server gives up on the write, cancels and frees the KV.
  CHECK(eventually([&] { return server.num_live() == 0 && backend.stats().num_running == 0; },
                   std::chrono::seconds(60)));
  CHECK(backend.stats().kv.used_slots == 0);
  CHECK(backend.stats().num_generated_tokens < 500000);
  ::close(fd);
  CHECK(curl(server.port(), "GET", "/health").status == 200);
}
