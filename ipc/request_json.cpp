#include "ipc/request_json.hpp"

#include <limits>

#include "ipc/errors.hpp"

namespace llmk::ipc {
namespace {

using nlohmann::json;

const char* type_name(const json& v) { return v.is_number_integer() ? "integer" : v.type_name(); }

// Types only: the bounds are validate_sampling_params' (core/request.hpp).
double get_number(const json& obj, const std::string& key, double fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw ParamError(key, "'" + key + "' must be a number, not " + type_name(*it));
  return it->get<double>();
}

// An integer that fits [lo, hi] (a range the value's type can hold; the
// request's own bounds are checked after parsing).
int64_t get_integer(const json& obj, const std::string& key, int64_t fallback, int64_t lo, int64_t hi) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) throw ParamError(key, "'" + key + "' must be an integer, not " + type_name(*it));
  const bool too_large = it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(hi);
  if (too_large || it->get<int64_t>() < lo || it->get<int64_t>() > hi) {
    throw ParamError(key, "'" + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                              "], got " + it->dump());
  }
  return it->get<int64_t>();
}

int32_t get_int32(const json& obj, const std::string& key, int32_t fallback) {
  return static_cast<int32_t>(get_integer(obj, key, fallback, std::numeric_limits<int32_t>::min(),
                                          std::numeric_limits<int32_t>::max()));
}

float get_float(const json& obj, const std::string& key, float fallback) {
  const double v = get_number(obj, key, fallback);
  // Beyond float's range: kept as infinity, which the bounds refuse.
  return static_cast<float>(v);
}

// Beam search, as vLLM's OpenAI server spells it: use_beam_search with the
// width in best_of (older vLLM) or n (newer), length_penalty and
// early_stopping (true, false or "never"); or llmk's beam_width alone.
void parse_beam_search(const json& body, SamplingParams& p) {
  const bool use = get_bool(body, "use_beam_search", false);
  const int32_t width = get_int32(body, "beam_width", 0);
  if (!use && width == 0) {
    for (const char* key : {"length_penalty", "early_stopping"})
      if (body.contains(key) && !body[key].is_null())
        throw ParamError(key, std::string("'") + key + "' needs beam search ('use_beam_search': true)");
    return;
  }
  const int32_t best_of = get_int32(body, "best_of", 0);
  if (width > 0 && best_of > 0 && best_of != width)
    throw ParamError("best_of", "'best_of' (" + std::to_string(best_of) + ") and 'beam_width' (" +
                                    std::to_string(width) + ") name different beam widths");
  // The width's bound, named as the request gave the width.
  const char* key = width != 0 ? "beam_width" : best_of != 0 ? "best_of" : "n";
  p.beam_width = width != 0 ? width : best_of != 0 ? best_of : p.n;
  if (p.beam_width < 1 || p.beam_width > sampling_limits::max_beam_width)
    throw ParamError(key, std::string("'") + key + "' must be in [1, " +
                              std::to_string(sampling_limits::max_beam_width) + "] as a beam width, got " +
                              std::to_string(p.beam_width));
  p.length_penalty = get_float(body, "length_penalty", p.length_penalty);
  if (auto it = body.find("early_stopping"); it != body.end() && !it->is_null()) {
    if (it->is_boolean()) p.early_stopping = it->get<bool>() ? EarlyStopping::immediate : EarlyStopping::heuristic;
    else if (it->is_string() && it->get<std::string>() == "never") p.early_stopping = EarlyStopping::never;
    else throw ParamError("early_stopping", "'early_stopping' must be true, false or \"never\", got " + it->dump());
  }
  // Unset, temperature is 1, which beam search accepts (it reads the raw
  // log-probabilities either way).
}

}  // namespace

std::string get_string(const json& obj, const std::string& key, const std::string& fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_string()) throw ParamError(key, "'" + key + "' must be a string, not " + type_name(*it));
  return it->get<std::string>();
}

void parse_bootstrap(const json& body, Request& request) {
  auto room = body.find("bootstrap_room");
  if (room == body.end() || room->is_null()) return;
  BootstrapTicket t;
  if (room->is_number_unsigned()) t.room = std::to_string(room->get<uint64_t>());
  else if (room->is_number_integer()) t.room = std::to_string(room->get<int64_t>());
  else if (room->is_string() && !room->get<std::string>().empty()) t.room = room->get<std::string>();
  else throw ParamError("bootstrap_room", "'bootstrap_room' must be an integer or a non-empty string");
  t.host = get_string(body, "bootstrap_host", "");
  if (t.host.empty()) throw ParamError("bootstrap_host", "'bootstrap_host' is required with 'bootstrap_room'");
  auto port = body.find("bootstrap_port");
  if (port == body.end() || !port->is_number_integer() || port->get<int64_t>() < 1 || port->get<int64_t>() > 65535)
    throw ParamError("bootstrap_port", "'bootstrap_port' must be a port number (1..65535) with 'bootstrap_room'");
  t.port = static_cast<int32_t>(port->get<int64_t>());
  request.bootstrap = std::move(t);
}

bool get_bool(const json& obj, const std::string& key, bool fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw ParamError(key, "'" + key + "' must be a boolean, not " + type_name(*it));
  return it->get<bool>();
}

SamplingParams parse_sampling(const json& body, LogprobsStyle style, int32_t max_context,
                              int32_t default_max_tokens) {
  SamplingParams p;
  const char* max_key = body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  // max_tokens must fit the context: the one bound that is the model's, not the request's.
  p.max_tokens = static_cast<int32_t>(
      get_integer(body, max_key, std::min(default_max_tokens, max_context), 1, std::max(1, max_context)));
  p.temperature = get_float(body, "temperature", p.temperature);
  p.top_p = get_float(body, "top_p", p.top_p);
  p.top_k = get_int32(body, "top_k", p.top_k);
  p.min_p = get_float(body, "min_p", p.min_p);
  p.presence_penalty = get_float(body, "presence_penalty", p.presence_penalty);
  p.frequency_penalty = get_float(body, "frequency_penalty", p.frequency_penalty);
  p.repetition_penalty = get_float(body, "repetition_penalty", p.repetition_penalty);
  p.n = get_int32(body, "n", p.n);
  if (auto it = body.find("seed"); it != body.end() && !it->is_null()) {
    p.seed = static_cast<uint64_t>(get_integer(body, "seed", 0, std::numeric_limits<int64_t>::min(),
                                               std::numeric_limits<int64_t>::max()));
  }
  p.ignore_eos = get_bool(body, "ignore_eos", false);
  p.num_speculative_tokens = get_int32(body, "num_speculative_tokens", p.num_speculative_tokens);
  const char* logprobs_key = "logprobs";
  if (style == LogprobsStyle::integer) {
    p.logprobs = get_int32(body, "logprobs", -1);
    if (p.logprobs < 0 && body.contains("logprobs") && !body["logprobs"].is_null())
      throw ParamError("logprobs", "'logprobs' must be in [0, " + std::to_string(sampling_limits::max_logprobs) +
                                       "], got " + body["logprobs"].dump());
  } else if (get_bool(body, "logprobs", false)) {
    logprobs_key = "top_logprobs";
    p.logprobs = get_int32(body, "top_logprobs", 0);
    if (p.logprobs < 0)
      throw ParamError("top_logprobs", "'top_logprobs' must be in [0, " +
                                           std::to_string(sampling_limits::max_logprobs) + "], got " +
                                           std::to_string(p.logprobs));
  } else if (body.contains("top_logprobs") && !body["top_logprobs"].is_null()) {
    throw ParamError("top_logprobs", "'top_logprobs' requires 'logprobs': true");
  }
  if (auto it = body.find("stop"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      p.stop.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      for (const auto& s : *it) {
        if (!s.is_string()) throw ParamError("stop", "'stop' must be a string or a list of strings");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      throw ParamError("stop", "'stop' must be a string or a list of strings");
    }
  }
  if (auto it = body.find("stop_token_ids"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) throw ParamError("stop_token_ids", "'stop_token_ids' must be a list of integers");
    for (const auto& v : *it) {
      if (!v.is_number_integer()) throw ParamError("stop_token_ids", "'stop_token_ids' must be a list of integers");
      p.stop_token_ids.push_back(v.get<int32_t>());
    }
  }
  if (p.top_k == -1) p.top_k = 0;  // -1 also means "off"
  parse_beam_search(body, p);
  try {
    validate_sampling_params(p);
  } catch (const FieldError& e) {
    // Chat requests spell the logprob count "top_logprobs".
    if (e.field() == "logprobs" && std::string(logprobs_key) != "logprobs") throw ParamError(logprobs_key, e.what());
    throw;
  }
  return p;
}

void parse_prompt(const json& value, const std::string& param, int32_t vocab_size, Request& request) {
  const json* v = &value;
  if (v->is_array() && v->size() == 1 && ((*v)[0].is_string() || (*v)[0].is_array())) v = &(*v)[0];
  if (v->is_string()) {
    request.prompt = v->get<std::string>();
    if (request.prompt.empty()) throw ParamError(param, "'" + param + "' is empty");
    return;
  }
  if (!v->is_array()) throw ParamError(param, "'" + param + "' must be a string or a list of token ids");
  if (v->empty()) throw ParamError(param, "'" + param + "' is empty");
  for (const auto& id : *v) {
    if (!id.is_number_integer()) {
      throw ParamError(param, "'" + param + "' must be a string or a list of token ids (batched prompts are "
                              "not supported)");
    }
    const int64_t t = id.get<int64_t>();
    if (t < 0 || t >= vocab_size) {
      throw ParamError(param, "token id " + std::to_string(t) + " in '" + param + "' is outside the vocabulary [0, " +
                                  std::to_string(vocab_size) + ")");
    }
    request.prompt_token_ids.push_back(static_cast<int32_t>(t));
  }
}

std::string finish_reason_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
    case FinishReason::none: break;
  }
  return "";
}

}  // namespace llmk::ipc
