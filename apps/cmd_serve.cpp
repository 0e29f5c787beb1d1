// llmk serve: the engine behind the ZeroMQ protocol (docs/protocol.md) and
// the OpenAI-compatible HTTP API. SIGINT/SIGTERM drain: no new requests,
// live ones may finish for server.drain_timeout_s, the rest are cancelled,
// exit 0.
#ifdef LLMK_HAVE_ENGINE

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <csignal>
#include <memory>
#include <optional>
#include <thread>

#include "actors/engine.hpp"
#include "apps/command.hpp"
#include "apps/model_options.hpp"
#include "apps/parallel_launch.hpp"
#include "core/error.hpp"
#include "ipc/engine_backend.hpp"
#include "ipc/kv_event_publisher.hpp"
#include "ipc/server.hpp"

namespace llmk::app {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int signal) { g_stop_signal = signal; }

struct ServeOptions {
  ModelOptions model;
  std::optional<std::string> http;
  std::optional<std::string> zmq;
  std::optional<std::string> zmq_broker;
  bool no_http = false;
  bool no_zmq = false;
  int http_threads = 64;
  std::string tool_parser = "auto";
};

int serve(const ServeOptions& o) {
  EngineConfig config = build_engine_config(o.model);
  if (o.http) config.server.http = *o.http;
  if (o.zmq) config.server.zmq = *o.zmq;
  if (o.no_http) config.server.http.clear();
  if (o.zmq_broker) config.server.zmq_broker = *o.zmq_broker;
  if (o.no_zmq) {
    config.server.zmq.clear();
    config.server.zmq_broker.clear();
  }
  if (config.server.http.empty() && config.server.zmq.empty() && config.server.zmq_broker.empty()) {
    throw Error(ErrorCode::invalid_config, "both front ends are off (server.http and server.zmq are empty)");
  }
  if (!config.server.http.empty()) ipc::split_host_port(config.server.http, "server.http");
  const ipc::AuthOptions auth = ipc::parse_auth_options(config.server.auth);  // before the model loads
  const ipc::TlsFiles tls = ipc::parse_tls_options(config.server.tls);
  if (const std::optional<int> code = serve_steps_unless_rank0(config)) return *code;

  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);

  // Declared before the engine: it publishes what the allocator reported until the engine is gone.
  std::unique_ptr<ipc::KvEventPublisher> kv_events;
  EngineOptions engine_options;
  if (!config.kv_events.endpoint.empty()) {
    kv_events = std::make_unique<ipc::KvEventPublisher>(config.kv_events);
    engine_options.kv_events = kv_events->log();
    spdlog::info("kv_events: publishing on {}{}", kv_events->endpoint(),
                 kv_events->replay_endpoint().empty() ? "" : ", replay on " + kv_events->replay_endpoint());
  }
  Engine engine(config, engine_options);
  ipc::EngineBackend backend(engine, o.tool_parser == "auto" ? std::nullopt
                                                            : ipc::tool_parser_from_name(o.tool_parser));
  ipc::ServerOptions server_options;
  server_options.http = config.server.http;
  server_options.zmq = config.server.zmq;
  server_options.zmq_broker = config.server.zmq_broker;
  server_options.max_body_bytes = config.server.max_body_bytes;
  server_options.drain_timeout_s = config.server.drain_timeout_s;
  server_options.http_threads = o.http_threads;
  server_options.replica_name = config.server.replica_name;
  server_options.auth = auth;
  server_options.request_timeout_s = config.server.request_timeout_s;
  server_options.tls = tls;
  const auto ms = [](double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); };
  server_options.http_io_timeout = ms(config.server.io_timeout_s);
  server_options.poll = {.keep = ms(config.server.poll_keep_s),
                         .max_finished = config.server.poll_max_finished,
                         .max_wait = ms(config.server.poll_max_wait_s)};
  ipc::Server server(backend, server_options);
  spdlog::info("ready: model '{}', context {} tokens, chat template {}", backend.model_info().name,
               backend.model_info().max_context,
               backend.model_info().chat_template.empty() ? "(none)" : backend.model_info().chat_template);

  while (g_stop_signal == 0 && !parallel_job_failed()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (parallel_job_failed()) {
    // Every request in flight or arriving now is answered 503 (peer_lost)
    // by the failing steps; then the job ends, non-zero, for a supervisor.
    spdlog::error("parallel job failed: answering requests with 503 for 1 s, then ending the job");
    std::this_thread::sleep_for(std::chrono::seconds(1));
    end_failed_job();
  }
  spdlog::info("signal {}: draining", static_cast<int>(g_stop_signal));
  const size_t num_cancelled = server.drain_and_stop();
  spdlog::info("stopped ({} request(s) cancelled at the drain timeout)", num_cancelled);
  return 0;
}

const CommandRegistration kServe{
    "serve", "Serve a model over ZeroMQ (protocol v1) and an OpenAI-compatible HTTP API", [](CLI::App& cmd) {
      auto o = std::make_shared<ServeOptions>();
      add_model_options(cmd, o->model);
      cmd.add_option("--http", o->http, "HTTP address HOST:PORT (default server.http = 127.0.0.1:8000; \"\" = off)");
      cmd.add_option("--zmq", o->zmq, "ZeroMQ endpoint (default server.zmq = tcp://127.0.0.1:5555; \"\" = off)");
      cmd.add_option("--zmq-broker", o->zmq_broker,
                     "serve ZeroMQ as a worker of the broker whose worker endpoint this is (llmk broker "
                     "--workers), instead of binding --zmq (server.zmq_broker)");
      cmd.add_flag("--no-http", o->no_http, "do not serve HTTP");
      cmd.add_flag("--no-zmq", o->no_zmq, "do not serve ZeroMQ");
      cmd.add_option("--http-threads", o->http_threads, "HTTP connections served at once (each stream holds one)")
          ->capture_default_str();
      cmd.add_option("--tool-parser", o->tool_parser,
                     "how chat completions read tool calls in the output (docs/tool_calls.md): auto (the format "
                     "the chat template writes), llama3_json, hermes, mistral or none")
          ->check(CLI::IsMember({"auto", "llama3_json", "hermes", "mistral", "none"}))
          ->capture_default_str();
      return std::function<int()>([o] { return serve(*o); });
    }};

}  // namespace
}  // namespace llmk::app

#endif  // LLMK_HAVE_ENGINE
