// `llmk broker`: one ZeroMQ endpoint for clients in front of many `llmk
// serve` replicas (each started with --zmq-broker at the broker's workers
// endpoint). See ipc/zmq_broker.hpp and docs/protocol.md.
#ifdef LLMK_HAVE_ENGINE

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <thread>

#include "apps/command.hpp"
#include "ipc/zmq_broker.hpp"

namespace llmk::app {
namespace {

volatile std::sig_atomic_t g_broker_stop = 0;

extern "C" void on_broker_signal(int signal) { g_broker_stop = signal; }

int broker(const ipc::ZmqBrokerOptions& options) {
  std::signal(SIGINT, on_broker_signal);
  std::signal(SIGTERM, on_broker_signal);
  ipc::ZmqBroker broker(options);
  spdlog::info("broker: clients connect to {}, replicas to {} (llmk serve --zmq-broker {})",
               broker.clients_endpoint(), broker.workers_endpoint(), broker.workers_endpoint());
  while (g_broker_stop == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  spdlog::info("signal {}: broker stops", static_cast<int>(g_broker_stop));
  broker.stop();
  return 0;
}

const CommandRegistration kBroker{
    "broker", "Give many `llmk serve` replicas one ZeroMQ endpoint (routes each request to the least loaded)",
    [](CLI::App& cmd) {
      auto o = std::make_shared<ipc::ZmqBrokerOptions>();
      cmd.add_option("--clients", o->clients, "endpoint clients connect to, as to one server")->capture_default_str();
      cmd.add_option("--workers", o->workers, "endpoint replicas connect to (llmk serve --zmq-broker)")
          ->capture_default_str();
      cmd.add_option("--heartbeat-ms", o->heartbeat_interval_ms,
                     "heartbeat interval with the replicas (they adopt it) and of ZMTP on both sockets")
          ->capture_default_str()
          ->check(CLI::Range(10, 3600000));
      cmd.add_option("--heartbeat-timeout-ms", o->heartbeat_timeout_ms,
                     "a replica silent this long is dropped (its requests fail with peer_lost)")
          ->capture_default_str()
          ->check(CLI::Range(20, 3600000));
      cmd.add_option("--queue-timeout-ms", o->queue_timeout_ms,
                     "a request waits this long for a registered replica, then fails with overloaded")
          ->capture_default_str()
          ->check(CLI::Range(0, 3600000));
      return std::function<int()>([o] { return broker(*o); });
    }};

}  // namespace
}  // namespace llmk::app

#endif  // LLMK_HAVE_ENGINE
