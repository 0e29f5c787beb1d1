// The configuration keys of KV events and the broker worker: off by default,
// and a bad value is refused naming its key.
#include <catch2/catch.hpp>

#include "core/config.hpp"
#include "core/error.hpp"

using namespace llmk;

namespace {

std::string refusal(const std::vector<std::string>& overrides) {
  try {
    load_config("", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("kv_events and server.zmq_broker are off by default and refuse what is not an endpoint", "[config]") {
  const EngineConfig defaults = load_config("", {});
  CHECK(defaults.kv_events.endpoint.empty());
  CHECK(defaults.server.zmq_broker.empty());
  const EngineConfig on = load_config("", {"kv_events.endpoint=tcp://*:5557", "kv_events.replay_endpoint=tcp://*:5558",
                                           "kv_events.topic=kv", "server.zmq_broker=tcp://127.0.0.1:5556"});
  CHECK(on.kv_events.replay_endpoint == "tcp://*:5558");
  CHECK(on.kv_events.topic == "kv");
  CHECK(on.server.zmq_broker == "tcp://127.0.0.1:5556");
  CHECK_THAT(refusal({"kv_events.endpoint=5557"}), Catch::Contains("kv_events.endpoint"));
  CHECK_THAT(refusal({"kv_events.replay_endpoint=tcp://*:5558"}), Catch::Contains("kv_events.endpoint is empty"));
  CHECK_THAT(refusal({"kv_events.endpoint=tcp://*:5557", "kv_events.max_queue_events=0"}),
             Catch::Contains("kv_events.max_queue_events"));
  CHECK_THAT(refusal({"server.zmq_broker=localhost"}), Catch::Contains("server.zmq_broker"));
}
