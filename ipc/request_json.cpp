#include "ipc/request_json.hpp"

#include <cmath>
#include <limits>

#include "ipc/errors.hpp"

namespace llmk::ipc {
namespace {

using nlohmann::json;

const char* type_name(const json& v) { return v.is_number_integer() ? "integer" : v.type_name(); }

double get_number(const json& obj, const std::string& key, double fallback, double lo, double hi) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw ParamError(key, "'" + key + "' must be a number, not " + type_name(*it));
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    throw ParamError(key, "'" + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                              "], got " + it->dump());
  }
  return v;
}

int64_t get_integer(const json& obj, const std::string& key, int64_t fallback, int64_t lo, int64_t hi) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) throw ParamError(key, "'" + key + "' must be an integer, not " + type_name(*it));
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    throw ParamError(key, "'" + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                              "], got " + it->dump());
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    throw ParamError(key, "'" + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                              "], got " + it->dump());
  }
  return v;
}

}  // namespace

std::string get_string(const json& obj, const std::string& key, const std::string& fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_string()) throw ParamError(key, "'" + key + "' must be a string, not " + type_name(*it));
  return it->get<std::string>();
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
  p.max_tokens = static_cast<int32_t>(
      get_integer(body, max_key, std::min(default_max_tokens, max_context), 1, std::max(1, max_context)));
  p.temperature = static_cast<float>(get_number(body, "temperature", 1.0, 0.0, 100.0));
  p.top_p = static_cast<float>(get_number(body, "top_p", 1.0, 0.0, 1.0));
  if (body.contains("top_p") && p.top_p <= 0.0f) throw ParamError("top_p", "'top_p' must be in (0, 1]");
  p.top_k = static_cast<int32_t>(get_integer(body, "top_k", 0, -1, std::numeric_limits<int32_t>::max()));
  if (p.top_k < 0) p.top_k = 0;  // -1 also means "off"
  p.min_p = static_cast<float>(get_number(body, "min_p", 0.0, 0.0, 1.0));
  p.presence_penalty = static_cast<float>(get_number(body, "presence_penalty", 0.0, -2.0, 2.0));
  p.frequency_penalty = static_cast<float>(get_number(body, "frequency_penalty", 0.0, -2.0, 2.0));
  p.repetition_penalty = static_cast<float>(get_number(body, "repetition_penalty", 1.0, 0.01, 100.0));
  p.n = static_cast<int32_t>(get_integer(body, "n", 1, 1, max_samples_per_request));
  if (auto it = body.find("seed"); it != body.end() && !it->is_null()) {
    p.seed = static_cast<uint64_t>(get_integer(body, "seed", 0, std::numeric_limits<int64_t>::min(),
                                               std::numeric_limits<int64_t>::max()));
  }
  p.ignore_eos = get_bool(body, "ignore_eos", false);
  if (style == LogprobsStyle::integer) {
    p.logprobs = static_cast<int32_t>(get_integer(body, "logprobs", -1, 0, max_top_logprobs));
  } else if (get_bool(body, "logprobs", false)) {
    p.logprobs = static_cast<int32_t>(get_integer(body, "top_logprobs", 0, 0, max_top_logprobs));
  } else if (body.contains("top_logprobs") && !body["top_logprobs"].is_null()) {
    throw ParamError("top_logprobs", "'top_logprobs' requires 'logprobs': true");
  }
  if (auto it = body.find("stop"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      p.stop.push_back(it->get<std::string>());
    } else if (it->is_array() && it->size() <= max_stop_strings) {
      for (const auto& s : *it) {
        if (!s.is_string()) throw ParamError("stop", "'stop' must be a string or a list of strings");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      throw ParamError("stop", "'stop' must be a string or a list of at most " + std::to_string(max_stop_strings) +
                                   " strings");
    }
    for (const auto& s : p.stop) {
      if (s.empty()) throw ParamError("stop", "'stop' strings must not be empty");
    }
  }
  if (auto it = body.find("stop_token_ids"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) throw ParamError("stop_token_ids", "'stop_token_ids' must be a list of integers");
    for (const auto& v : *it) {
      if (!v.is_number_integer()) throw ParamError("stop_token_ids", "'stop_token_ids' must be a list of integers");
      p.stop_token_ids.push_back(v.get<int32_t>());
    }
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
