// llmk::Client: a ZeroMQ client for `llmk serve` (protocol v1, see
// docs/protocol.md). One DEALER socket owned by an I/O thread; any thread
// may call the methods. Many requests may be live at once; their events
// are delivered as llmk::RequestEvent, in order per request, exactly as the
// Engine API delivers them (the text deltas of a request add up to its text).
// A server that stays silent longer than `server_timeout` while requests are
// live fails them (finish_reason error) instead of hanging.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/request.hpp"

namespace llmk {

struct ClientOptions {
  std::chrono::milliseconds server_timeout{10000};
  // CURVE (a server with server.auth.curve_secret_key_file): the server's
  // public key and this client's pair, Z85 ("" = plain ZeroMQ). A server
  // that does not admit the key never answers: requests fail after
  // server_timeout.
  std::string curve_server_key{};
  std::string curve_public_key{};
  std::string curve_secret_key{};
};

class Client {
 public:
  using EventCallback = std::function<void(const RequestEvent&)>;

  explicit Client(const std::string& endpoint, ClientOptions options = {});
  // Says "bye" (the server cancels what is still live) and closes.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // request.id must be unique among this client's live requests. With
  // stream = false the whole text comes in the final event. Callbacks run on
  // the client's I/O thread and must not block.
  void submit(const Request& request, bool stream, EventCallback on_event);
  std::unique_ptr<EventStream> submit(const Request& request, bool stream = true);
  void cancel(const std::string& request_id);

  // Round trips; throw Error(internal) naming the endpoint on timeout.
  nlohmann::json health(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  nlohmann::json stats(std::chrono::milliseconds timeout = std::chrono::seconds(5));

  // Submits and collects a whole request: every sample's text and tokens,
  // the last event's finish_reason/usage/timings. Throws Error (with the
  // server's error code) when the request fails or times out.
  struct Result {
    std::vector<std::string> texts;                 // by sample index
    std::vector<std::vector<int32_t>> token_ids;    // by sample index
    std::vector<FinishReason> finish_reasons;       // by sample index
    Usage usage;                                    // summed completion tokens
    Timings timings;                                // of sample 0
  };
  Result generate(const Request& request, bool stream = true,
                  std::chrono::milliseconds timeout = std::chrono::seconds(60));

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmk
