// The ZeroMQ protocol, version 1 (docs/protocol.md is the reference): JSON
// messages between DEALER clients and the server's ROUTER socket. This file
// turns payloads into typed messages and events into payloads; sockets live
// in zmq_server.* and client.*.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/engine_stats.hpp"
#include "core/request.hpp"

namespace llmk::ipc {

constexpr int zmq_protocol_version = 1;
constexpr size_t max_client_id_bytes = 256;

enum class ClientMessageType { submit, cancel, health, stats, ping, bye, embed };

struct ClientMessage {
  ClientMessageType type = ClientMessageType::ping;
  std::string id;          // submit, cancel: the client's request id
  nlohmann::json ref;      // health, stats, ping: echoed in the reply (null when absent)
  Request request;         // submit (request.id is the client's id)
  bool stream = true;      // submit
  double timeout_s = 0;    // submit: its deadline in seconds; 0 = the server's (server.request_timeout_s)
  // embed: the message's /v1/embeddings fields (input, dimensions,
  // encoding_format, pooling, normalize, model), checked by the server
  // against its model (ipc/embeddings.hpp parse_embeddings_fields).
  nlohmann::json embed_fields;
};

// Parses one payload. Throws ProtocolError (malformed, unsupported_version,
// unknown_type) or ParamError (a field's type or value). `max_context` and
// `vocab_size` bound max_tokens and prompt token ids.
ClientMessage parse_client_message(std::string_view payload, int32_t max_context, int32_t vocab_size);
// The "id" to echo in an error reply for a payload that failed to parse:
// its "id" when that is a string, else null.
nlohmann::json error_reply_id(std::string_view payload);

// Server -> client messages.
nlohmann::json token_message(const std::string& id, const RequestEvent& event);
nlohmann::json final_message(const std::string& id, const RequestEvent& event, const std::string& text,
                             const std::vector<int32_t>& token_ids);
nlohmann::json health_message(const nlohmann::json& ref, bool draining);
nlohmann::json stats_message(const nlohmann::json& ref, const EngineStats& stats);
nlohmann::json pong_message(const nlohmann::json& ref);
nlohmann::json keepalive_message();
// The answer to an "embed": {"v", "type": "embedding", "id", "data":
// [{"index", "embedding"}], "model", "usage"}, the vectors as the HTTP
// route gives them (floats, or base64 float32 bytes).
nlohmann::json embedding_message(const std::string& id, const std::vector<std::vector<float>>& vectors, bool base64,
                                 const std::string& model, int32_t prompt_tokens);

// Client side: a server message about a request, as the event the engine
// would have delivered. A "final" message carries the sample's whole text;
// `streamed` says the deltas already arrived (then the event carries none).
// An "error" message becomes a finished event with finish_reason == error
// that ends the request.
RequestEvent event_from_message(const nlohmann::json& message, bool streamed);

// nlohmann::json::dump that never throws on bad UTF-8 (replaces it).
std::string dump_json(const nlohmann::json& j);

}  // namespace llmk::ipc
