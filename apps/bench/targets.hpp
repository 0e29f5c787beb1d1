// Targets for the real front ends. Each is compiled only where its library
// is built: the Engine (llmk_actors), llmk::Client (llmk_ipc); HTTP always.
#pragma once

#include <memory>
#include <string>

#include "apps/bench/target.hpp"
#include "core/config.hpp"

namespace llmk {
class Engine;
}

namespace llmk::bench {

// In-process: submits to the Engine (owned elsewhere).
std::unique_ptr<Target> make_engine_target(Engine& engine);
// `llmk serve` over ZeroMQ, e.g. "tcp://127.0.0.1:5555"; stats via the protocol.
std::unique_ptr<Target> make_zmq_target(const std::string& endpoint);
// `llmk serve` over HTTP: POST /v1/completions with stream=true (SSE);
// each chunk counts as one token. No server stats (nullopt).
std::unique_ptr<Target> make_http_target(const std::string& host, int port, const std::string& model);

}  // namespace llmk::bench
