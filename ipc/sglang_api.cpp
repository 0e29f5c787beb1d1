#include "ipc/sglang_api.hpp"

#include <algorithm>
#include <set>

#include "ipc/errors.hpp"
#include "ipc/request_json.hpp"

namespace llmk::ipc {
namespace {

using nlohmann::json;

// Top-level keys the routers add to every /generate body, each accepted at
// the value that asks for nothing llmk lacks (null: any value).
const std::vector<std::pair<std::string, json>> kAcceptedAtDefault = {
    {"model", nullptr},
    {"log_metrics", nullptr},           {"no_logs", nullptr},
    {"background", false},              {"return_logprob", false},
    {"return_text_in_logprobs", false}, {"return_hidden_states", false},
    {"return_bytes", false},            {"return_entropy", false},
    {"logprob_start_len", -1},          {"top_logprobs_num", 0},
};

// sampling_params keys accepted only at the value SGLang defaults them to.
const std::vector<std::pair<std::string, json>> kSamplingAtDefault = {
    {"skip_special_tokens", true},
    {"spaces_between_special_tokens", true},
    {"no_stop_trim", false},
    {"min_new_tokens", 0},
    {"stream_interval", nullptr},
};

// sampling_params keys that map onto llmk's (parse_sampling's spelling).
const std::vector<std::pair<std::string, std::string>> kSamplingNames = {
    {"max_new_tokens", "max_tokens"},
    {"temperature", "temperature"},
    {"top_p", "top_p"},
    {"top_k", "top_k"},
    {"min_p", "min_p"},
    {"stop", "stop"},
    {"stop_token_ids", "stop_token_ids"},
    {"ignore_eos", "ignore_eos"},
    {"n", "n"},
    {"presence_penalty", "presence_penalty"},
    {"frequency_penalty", "frequency_penalty"},
    {"repetition_penalty", "repetition_penalty"},
    {"sampling_seed", "seed"},
};

template <typename Table>
const json* find_default(const Table& table, const std::string& key) {
  for (const auto& [name, value] : table) {
    if (name == key) return &value;
  }
  return nullptr;
}

// A key from the at-default tables: its value must be null or the default.
void check_at_default(const std::string& field, const json& value, const json& allowed) {
  if (allowed.is_null() || value.is_null() || value == allowed) return;
  throw ParamError(field, "'" + field + "' = " + value.dump() + " is not supported by llmk (only " + allowed.dump() +
                              ")");
}

SamplingParams parse_sglang_sampling(const json& body, int32_t max_context) {
  auto it = body.find("sampling_params");
  if (it == body.end() || it->is_null()) return parse_sampling(json::object(), LogprobsStyle::integer, max_context, 128);
  if (!it->is_object()) throw ParamError("sampling_params", "'sampling_params' must be an object");
  json renamed = json::object();
  for (const auto& [key, value] : it->items()) {
    const std::string field = "sampling_params." + key;
    const auto name = std::find_if(kSamplingNames.begin(), kSamplingNames.end(),
                                   [&](const auto& entry) { return entry.first == key; });
    if (name != kSamplingNames.end()) {
      renamed[name->second] = value;
    } else if (const json* allowed = find_default(kSamplingAtDefault, key)) {
      check_at_default(field, value, *allowed);
    } else {
      throw ParamError(field, "unknown sampling parameter '" + key + "'");
    }
  }
  try {
    // SGLang's default max_new_tokens is 128.
    return parse_sampling(renamed, LogprobsStyle::integer, max_context, 128);
  } catch (const FieldError& e) {
    // Name the field as the request spelled it.
    for (const auto& [sglang, llmk] : kSamplingNames) {
      if (llmk == e.field()) throw ParamError("sampling_params." + sglang, e.what());
    }
    throw;
  }
}

json finish_reason_json(FinishReason reason, const Usage& usage, const std::string& error) {
  switch (reason) {
    case FinishReason::stop: return {{"type", "stop"}, {"matched", nullptr}};
    case FinishReason::length: return {{"type", "length"}, {"length", usage.completion_tokens}};
    case FinishReason::cancelled: return {{"type", "abort"}, {"message", "cancelled"}};
    case FinishReason::error: return {{"type", "abort"}, {"message", error}};
    case FinishReason::none: break;
  }
  return nullptr;
}

}  // namespace

SglangGenerateRequest parse_sglang_generate(const std::string& body, const Backend& backend) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    throw ProtocolError(ProtocolFailure::malformed, "the /generate body must be a JSON object");
  }
  const ModelInfo model = backend.model_info();
  SglangGenerateRequest out;
  const bool has_text = j.contains("text") && !j["text"].is_null();
  const bool has_ids = j.contains("input_ids") && !j["input_ids"].is_null();
  if (has_text == has_ids) throw ParamError("text", "give exactly one of 'text' and 'input_ids'");
  if (has_text) {
    const json& text = j["text"];
    if (text.is_array()) throw ParamError("text", "batched 'text' (a list of prompts) is not supported; send one each");
    if (!text.is_string()) throw ParamError("text", "'text' must be a string");
    parse_prompt(text, "text", model.vocab_size, out.request);
  } else {
    const json& ids = j["input_ids"];
    if (ids.is_array() && !ids.empty() && ids[0].is_array()) {
      throw ParamError("input_ids", "batched 'input_ids' (a list of prompts) is not supported; send one each");
    }
    if (!ids.is_array()) throw ParamError("input_ids", "'input_ids' must be a list of token ids");
    parse_prompt(ids, "input_ids", model.vocab_size, out.request);
  }
  out.request.sampling = parse_sglang_sampling(j, model.max_context);
  out.stream = get_bool(j, "stream", false);
  out.rid = get_string(j, "rid", "");
  parse_bootstrap(j, out.request);
  static const std::set<std::string> kOwn = {"text", "input_ids", "sampling_params", "stream", "rid"};
  for (const auto& [key, value] : j.items()) {
    if (kOwn.count(key) > 0 || std::find(std::begin(kBootstrapFields), std::end(kBootstrapFields), key) !=
                                   std::end(kBootstrapFields))
      continue;
    const json* allowed = find_default(kAcceptedAtDefault, key);
    if (allowed == nullptr) throw ParamError(key, "unknown /generate field '" + key + "'");
    check_at_default(key, value, *allowed);
  }
  return out;
}

SglangResponse::SglangResponse(std::string id, int32_t num_samples)
    : id_(std::move(id)), samples_(static_cast<size_t>(std::max(1, num_samples))) {}

void SglangResponse::add(const RequestEvent& ev) {
  if (static_cast<size_t>(ev.index) >= samples_.size()) return;
  Sample& s = samples_[static_cast<size_t>(ev.index)];
  s.text += ev.text_delta;
  s.output_ids.insert(s.output_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
  if (ev.finished) {
    s.usage = ev.usage;
    s.e2e_s = ev.timings.e2e_s;
    s.finish_reason = finish_reason_json(ev.finish_reason, ev.usage, ev.error);
  }
}

std::vector<json> SglangResponse::chunks(const RequestEvent& ev) {
  add(ev);
  if (static_cast<size_t>(ev.index) >= samples_.size()) return {};
  if (ev.text_delta.empty() && ev.token_ids.empty() && !ev.finished) return {};
  json chunk = sample_json(static_cast<size_t>(ev.index));
  if (samples_.size() > 1) chunk["index"] = ev.index;
  return {chunk};
}

json SglangResponse::sample_json(size_t index) const {
  const Sample& s = samples_[index];
  // Until the sample ends, the usage is what has been generated so far.
  const int32_t completion = s.finish_reason.is_null() ? static_cast<int32_t>(s.output_ids.size())
                                                       : s.usage.completion_tokens;
  return {{"text", s.text},
          {"output_ids", s.output_ids},
          {"meta_info",
           {{"id", id_},
            {"finish_reason", s.finish_reason},
            {"prompt_tokens", s.usage.prompt_tokens},
            {"completion_tokens", completion},
            {"cached_tokens", s.usage.cached_prompt_tokens},
            {"e2e_latency", s.e2e_s}}}};
}

json SglangResponse::response() const {
  if (samples_.size() == 1) return sample_json(0);
  json out = json::array();
  for (size_t i = 0; i < samples_.size(); ++i) out.push_back(sample_json(i));
  return out;
}

json sglang_server_info(const Backend& backend, const std::string& replica_name) {
  const ModelInfo model = backend.model_info();
  const EngineStats stats = backend.stats();
  return {{"engine", "llmk"},
          {"replica_name", replica_name},
          {"model_path", model.model_path},
          {"served_model_name", model.name},
          {"context_length", model.max_context},
          {"max_total_num_tokens", stats.kv.total_slots},
          {"max_queued_requests", model.max_queue},
          {"num_running_reqs", stats.num_running},
          {"num_waiting_reqs", stats.num_waiting},
          {"chat_template", model.chat_template.empty() ? json(nullptr) : json(model.chat_template)}};
}

json sglang_model_info(const Backend& backend) {
  const ModelInfo model = backend.model_info();
  return {{"model_path", model.model_path},
          {"served_model_name", model.name},
          {"is_generation", true},
          {"context_length", model.max_context},
          {"vocab_size", model.vocab_size}};
}

json sglang_load(const Backend& backend) {
  const EngineStats stats = backend.stats();
  return json::array({{{"dp_rank", 0},
                       {"num_reqs", stats.num_running + stats.num_waiting},
                       {"num_waiting_reqs", stats.num_waiting},
                       {"num_tokens", stats.kv.used_slots}}});
}

json sglang_flush_cache(Backend& backend) {
  return {{"status", "ok"}, {"num_dropped_blocks", backend.flush_cache()}};
}

}  // namespace llmk::ipc
