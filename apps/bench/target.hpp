// What the benchmark drives: anything that accepts a Request and streams its
// RequestEvents back (the in-process Engine, `llmk serve` over ZeroMQ or
// HTTP, or a test stub). Times are taken by the caller when events arrive,
// so every target is measured the same way, client-side.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "core/engine_stats.hpp"
#include "core/request.hpp"

namespace llmk::bench {

class Target {
 public:
  using EventCallback = std::function<void(const RequestEvent&)>;
  virtual ~Target() = default;
  // Events may arrive on any thread, in order per request; the last one has
  // request_done. A refused request is answered by a finished event with
  // finish_reason == error, never an exception.
  virtual void submit(Request request, EventCallback on_event) = 0;
  // The server's counters (KV usage, preemptions), or nullopt when this
  // target cannot report them. Called periodically while a run is live.
  virtual std::optional<EngineStats> stats() = 0;
  virtual std::string name() const = 0;
};

}  // namespace llmk::bench
