#include "ipc/zmq_protocol.hpp"

#include <cmath>

#include "ipc/embeddings.hpp"
#include "ipc/errors.hpp"
#include "ipc/request_json.hpp"
#include "ipc/structured_json.hpp"

namespace llmk::ipc {
namespace {

using nlohmann::json;

const std::vector<std::string> submit_keys = {"v", "type", "id", "prompt", "prompt_token_ids", "params", "stream",
                                              "add_bos", "timeout"};
const std::vector<std::string> embed_keys = {"v",         "type",           "id",      "input", "model",
                                             "dimensions", "encoding_format", "pooling", "normalize"};
const std::vector<std::string> param_keys = {
    "max_tokens",      "temperature",       "top_p",          "top_k",    "min_p", "stop", "stop_token_ids", "n",
    "seed",            "logprobs",          "presence_penalty", "frequency_penalty", "repetition_penalty",
    "ignore_eos",      "num_speculative_tokens", "use_beam_search", "beam_width",
    "length_penalty",  "early_stopping"};

// The sampling keys plus the structured-output ones (ipc/structured_json.hpp).
std::vector<std::string> with_structured_output_fields(std::vector<std::string> keys) {
  keys.insert(keys.end(), std::begin(kStructuredOutputFields), std::end(kStructuredOutputFields));
  return keys;
}

void reject_unknown_keys(const json& obj, const std::vector<std::string>& known, const std::string& where) {
  for (const auto& [key, value] : obj.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      throw ParamError(key, "unknown field '" + key + "' in " + where);
    }
  }
}

std::string require_id(const json& msg) {
  auto it = msg.find("id");
  if (it == msg.end()) throw ParamError("id", "'id' is required");
  if (!it->is_string()) throw ParamError("id", "'id' must be a string");
  auto id = it->get<std::string>();
  if (id.empty() || id.size() > max_client_id_bytes) {
    throw ParamError("id", "'id' must have 1 to " + std::to_string(max_client_id_bytes) + " bytes");
  }
  return id;
}

json logprobs_json(const std::vector<TokenLogprob>& logprobs) {
  json out = json::array();
  for (const auto& lp : logprobs) {
    json top = json::array();
    for (const auto& [id, value] : lp.top) top.push_back({id, value});
    out.push_back({{"token_id", lp.token_id}, {"logprob", lp.logprob}, {"top", top}});
  }
  return out;
}

}  // namespace

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

ClientMessage parse_client_message(std::string_view payload, int32_t max_context, int32_t vocab_size) {
  json msg;
  try {
    msg = json::parse(payload);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number that overflows
    throw ProtocolError(ProtocolFailure::malformed, std::string("malformed JSON: ") + e.what());
  }
  if (!msg.is_object()) throw ProtocolError(ProtocolFailure::malformed, "a message must be a JSON object");
  auto v = msg.find("v");
  if (v == msg.end() || !v->is_number_integer() || v->get<int64_t>() != zmq_protocol_version) {
    throw ProtocolError(ProtocolFailure::unsupported_version,
                        "unsupported protocol version " + (v == msg.end() ? std::string("(missing 'v')") : v->dump()) +
                            "; this server speaks v 1");
  }
  auto t = msg.find("type");
  if (t == msg.end() || !t->is_string()) throw ParamError("type", "'type' must be a string");
  const std::string type = t->get<std::string>();
  ClientMessage out;
  out.ref = msg.value("ref", json());
  if (type == "submit") {
    reject_unknown_keys(msg, submit_keys, "a submit message");
    out.type = ClientMessageType::submit;
    out.id = require_id(msg);
    out.request.id = out.id;
    const bool has_text = msg.contains("prompt"), has_ids = msg.contains("prompt_token_ids");
    if (has_text == has_ids) throw ParamError("prompt", "give exactly one of 'prompt' and 'prompt_token_ids'");
    if (has_text) {
      if (!msg["prompt"].is_string()) throw ParamError("prompt", "'prompt' must be a string");
      parse_prompt(msg["prompt"], "prompt", vocab_size, out.request);
    } else {
      if (!msg["prompt_token_ids"].is_array()) {
        throw ParamError("prompt_token_ids", "'prompt_token_ids' must be a list of integers");
      }
      parse_prompt(msg["prompt_token_ids"], "prompt_token_ids", vocab_size, out.request);
    }
    const json params = msg.value("params", json::object());
    if (!params.is_object()) throw ParamError("params", "'params' must be an object");
    reject_unknown_keys(params, with_structured_output_fields(param_keys), "'params'");
    out.request.sampling = parse_sampling(params, LogprobsStyle::integer, max_context);
    out.request.sampling.structured = parse_structured_output(params);
    out.request.strict_context = true;  // prompt + max_tokens must fit the context
    out.stream = get_bool(msg, "stream", true);
    out.request.add_bos = get_bool(msg, "add_bos", true);
    if (msg.contains("timeout") && !msg["timeout"].is_null()) {
      const json& t = msg["timeout"];
      if (!t.is_number() || !(t.get<double>() > 0) || !std::isfinite(t.get<double>()))
        throw ParamError("timeout", "timeout must be a positive number of seconds, got " + t.dump());
      out.timeout_s = t.get<double>();
    }
  } else if (type == "cancel") {
    out.type = ClientMessageType::cancel;
    out.id = require_id(msg);
  } else if (type == "health") {
    out.type = ClientMessageType::health;
  } else if (type == "stats") {
    out.type = ClientMessageType::stats;
  } else if (type == "ping") {
    out.type = ClientMessageType::ping;
  } else if (type == "bye") {
    out.type = ClientMessageType::bye;
  } else if (type == "embed") {
    reject_unknown_keys(msg, embed_keys, "an embed message");
    out.type = ClientMessageType::embed;
    out.id = require_id(msg);
    out.embed_fields = std::move(msg);
    out.embed_fields.erase("v");
    out.embed_fields.erase("type");
    out.embed_fields.erase("id");
  } else {
    throw ProtocolError(ProtocolFailure::unknown_type,
                        "unknown message type '" + type + "' (submit, cancel, health, stats, ping, bye, embed)");
  }
  return out;
}

json error_reply_id(std::string_view payload) {
  const json msg = json::parse(payload, nullptr, false);
  if (msg.is_object()) {
    auto it = msg.find("id");
    if (it != msg.end() && it->is_string()) return *it;
  }
  return nullptr;
}

json token_message(const std::string& id, const RequestEvent& ev) {
  json j = {{"v", 1}, {"type", "token"}, {"id", id}, {"index", ev.index}, {"token_ids", ev.token_ids},
            {"text", ev.text_delta}};
  if (!ev.logprobs.empty()) j["logprobs"] = logprobs_json(ev.logprobs);
  return j;
}

json final_message(const std::string& id, const RequestEvent& ev, const std::string& text,
                   const std::vector<int32_t>& token_ids) {
  json msg = {{"v", 1},
              {"type", "final"},
              {"id", id},
              {"index", ev.index},
              {"finish_reason", finish_reason_string(ev.finish_reason)},
              {"text", text},
              {"token_ids", token_ids},
              {"usage",
               {{"prompt_tokens", ev.usage.prompt_tokens},
                {"completion_tokens", ev.usage.completion_tokens},
                {"cached_prompt_tokens", ev.usage.cached_prompt_tokens}}},
              {"timings",
               {{"queue_s", ev.timings.queue_s},
                {"time_to_first_token_s", ev.timings.time_to_first_token_s},
                {"e2e_s", ev.timings.e2e_s}}},
              {"done", ev.request_done}};
  if (ev.beam) msg["beam"] = {{"cumulative_logprob", ev.beam->cumulative_logprob}, {"score", ev.beam->score}};
  return msg;
}

json health_message(const json& ref, bool draining) {
  return {{"v", 1}, {"type", "health"}, {"ref", ref}, {"status", draining ? "draining" : "ok"}};
}

json stats_message(const json& ref, const EngineStats& st) {
  return {{"v", 1},
          {"type", "stats"},
          {"ref", ref},
          {"num_running", st.num_running},
          {"num_waiting", st.num_waiting},
          {"num_requests_total", st.num_requests_total},
          {"num_requests_finished", st.num_requests_finished},
          {"num_prompt_tokens", st.num_prompt_tokens},
          {"num_prefill_tokens", st.num_prefill_tokens},
          {"num_generated_tokens", st.num_generated_tokens},
          {"num_preemptions", st.num_preemptions},
          {"num_steps", st.num_steps},
          {"mean_batch_seqs", st.mean_batch_seqs},
          {"mean_batch_tokens", st.mean_batch_tokens},
          {"peak_running", st.peak_running},
          {"kv",
           {{"total_slots", st.kv.total_slots},
            {"reserved_slots", st.kv.reserved_slots},
            {"used_slots", st.kv.used_slots},
            {"num_seqs", st.kv.num_seqs},
            {"num_relocations", st.kv.num_relocations}}}};
}

json pong_message(const json& ref) { return {{"v", 1}, {"type", "pong"}, {"ref", ref}}; }

json keepalive_message() { return {{"v", 1}, {"type", "keepalive"}}; }

namespace {

FinishReason finish_reason_from(const std::string& s) {
  if (s == "stop") return FinishReason::stop;
  if (s == "length") return FinishReason::length;
  if (s == "cancelled") return FinishReason::cancelled;
  if (s == "error") return FinishReason::error;
  return FinishReason::none;
}

ErrorCode error_code_from(const std::string& code) {
  for (auto c : {ErrorCode::invalid_argument, ErrorCode::invalid_config, ErrorCode::bad_checkpoint,
                 ErrorCode::unsupported, ErrorCode::plugin, ErrorCode::not_found, ErrorCode::overloaded,
                 ErrorCode::cancelled, ErrorCode::peer_lost, ErrorCode::internal, ErrorCode::deadline_exceeded}) {
    if (code == to_string(c)) return c;
  }
  if (code == "shutting_down") return ErrorCode::overloaded;
  if (code == "unknown_type") return ErrorCode::not_found;
  return code == "internal" ? ErrorCode::internal : ErrorCode::invalid_argument;
}

}  // namespace

RequestEvent event_from_message(const json& msg, bool streamed) {
  RequestEvent ev;
  ev.request_id = msg.value("id", json()).is_string() ? msg["id"].get<std::string>() : std::string();
  ev.index = msg.value("index", 0);
  const std::string type = msg.value("type", "");
  if (type == "token" || (type == "final" && !streamed)) {
    ev.token_ids = msg.value("token_ids", std::vector<int32_t>{});
    ev.text_delta = msg.value("text", "");
    for (const auto& lp : msg.value("logprobs", json::array())) {
      TokenLogprob t{lp.value("token_id", 0), lp.value("logprob", 0.0f), {}};
      for (const auto& pair : lp.value("top", json::array())) t.top.emplace_back(pair[0].get<int32_t>(), pair[1].get<float>());
      ev.logprobs.push_back(std::move(t));
    }
  }
  if (type == "final") {
    ev.finished = true;
    ev.finish_reason = finish_reason_from(msg.value("finish_reason", ""));
    const json usage = msg.value("usage", json::object());
    ev.usage.prompt_tokens = usage.value("prompt_tokens", 0);
    ev.usage.completion_tokens = usage.value("completion_tokens", 0);
    ev.usage.cached_prompt_tokens = usage.value("cached_prompt_tokens", 0);
    const json timings = msg.value("timings", json::object());
    ev.timings.queue_s = timings.value("queue_s", 0.0);
    ev.timings.time_to_first_token_s = timings.value("time_to_first_token_s", 0.0);
    ev.timings.e2e_s = timings.value("e2e_s", 0.0);
    if (auto beam = msg.find("beam"); beam != msg.end() && beam->is_object())
      ev.beam = BeamScore{beam->value("cumulative_logprob", 0.0), beam->value("score", 0.0)};
    ev.request_done = msg.value("done", false);
  } else if (type == "error") {
    ev.finished = ev.request_done = true;
    ev.finish_reason = FinishReason::error;
    ev.error_code = error_code_from(msg.value("code", "internal"));
    ev.error = msg.value("code", "internal") + ": " + msg.value("message", "");
    if (auto param = msg.find("param"); param != msg.end() && param->is_string()) ev.error_field = *param;
  }
  return ev;
}

json embedding_message(const std::string& id, const std::vector<std::vector<float>>& vectors, bool base64,
                       const std::string& model, int32_t prompt_tokens) {
  json reply = embeddings_response(vectors, base64, model, prompt_tokens);
  json out = {{"v", 1}, {"type", "embedding"}, {"id", id}};
  for (auto& [key, value] : reply.items()) {
    if (key != "object") out[key] = std::move(value);
  }
  for (json& item : out["data"]) item.erase("object");
  return out;
}

}  // namespace llmk::ipc
