#include "ipc/metrics.hpp"

#include "ipc/request_json.hpp"

#include <algorithm>
#include <cstdio>

namespace llmk::ipc {
namespace {

const char* frontend_name(Frontend f) { return f == Frontend::http ? "http" : "zmq"; }

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void scalar(std::string& out, const char* type, const std::string& name, const std::string& help, double v) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + number(v) + "\n";
}

// A label value escaped for the text format.
std::string label_value(const std::string& value) {
  std::string escaped;
  for (const char c : value) {
    if (c == '\\' || c == '"') escaped += '\\';
    if (c == '\n') {
      escaped += "\\n";
      continue;
    }
    escaped += c;
  }
  return escaped;
}

// Adds replica="<name>" to every sample line of a rendered exposition.
std::string with_replica_label(const std::string& text, const std::string& name) {
  const std::string label = "replica=\"" + label_value(name) + "\"";
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    if (line.empty() || line[0] == '#') {
      out += line + "\n";
      continue;
    }
    // NAME[{LABELS}] VALUE: the label goes last among the labels.
    const size_t space = line.rfind(' ');
    if (space != std::string::npos && space > 0 && line[space - 1] == '}') {
      out += line.substr(0, space - 1) + "," + label + line.substr(space - 1) + "\n";
    } else {
      out += line.substr(0, space) + "{" + label + "}" + line.substr(space) + "\n";
    }
  }
  return out;
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::render(const std::string& name, const std::string& help, std::string& out) const {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum " + number(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}),
      inter_token_({0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                    0.4, 0.5, 0.75, 1, 2.5}),
      e2e_({0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120}) {}

void Metrics::on_finished(Frontend frontend, const RequestEvent& ev) {
  std::lock_guard lock(mutex_);
  num_generation_tokens_ += static_cast<uint64_t>(ev.usage.completion_tokens);
  if (!ev.request_done) return;
  ++num_requests_[{frontend_name(frontend), finish_reason_string(ev.finish_reason)}];
  num_prompt_tokens_ += static_cast<uint64_t>(ev.usage.prompt_tokens);
  const auto& times = ev.timings.token_times_s;
  if (!times.empty()) ttft_.observe(ev.timings.time_to_first_token_s);
  for (size_t i = 1; i < times.size(); ++i) inter_token_.observe(times[i] - times[i - 1]);
  if (ev.finish_reason != FinishReason::error) e2e_.observe(ev.timings.e2e_s);
}

void Metrics::set_replica_name(const std::string& name) {
  std::lock_guard lock(mutex_);
  replica_name_ = name;
}

std::string Metrics::replica_name() const {
  std::lock_guard lock(mutex_);
  return replica_name_;
}

void Metrics::on_rejected(Frontend frontend, const std::string& code, const std::string& key_name,
                          const std::string& reason) {
  std::lock_guard lock(mutex_);
  ++num_rejected_[{frontend_name(frontend), code, key_name, reason}];
}

void Metrics::on_embeddings(Frontend frontend, size_t num_inputs, int64_t prompt_tokens) {
  std::lock_guard lock(mutex_);
  EmbeddingCounts& counts = embeddings_[frontend_name(frontend)];
  ++counts.requests;
  counts.inputs += num_inputs;
  counts.prompt_tokens += static_cast<uint64_t>(std::max<int64_t>(prompt_tokens, 0));
}

std::string Metrics::render(const EngineStats& st) const {
  std::string out;
  std::lock_guard lock(mutex_);
  out += "# HELP llmk_requests_total Requests completed, by front end and finish reason.\n"
         "# TYPE llmk_requests_total counter\n";
  for (const auto& [key, n] : num_requests_) {
    out += "llmk_requests_total{frontend=\"" + key.first + "\",finish_reason=\"" + key.second + "\"} " +
           std::to_string(n) + "\n";
  }
  out += "# HELP llmk_requests_rejected_total Requests refused before reaching the engine, by error code "
         "(and for a per-key limit, by key name and limit).\n"
         "# TYPE llmk_requests_rejected_total counter\n";
  for (const auto& [key, n] : num_rejected_) {
    out += "llmk_requests_rejected_total{frontend=\"" + key[0] + "\",code=\"" + key[1] + "\"";
    if (!key[2].empty()) out += ",key=\"" + label_value(key[2]) + "\",reason=\"" + key[3] + "\"";
    out += "} " + std::to_string(n) + "\n";
  }
  scalar(out, "counter", "llmk_prompt_tokens_total", "Prompt tokens of completed requests.",
         static_cast<double>(num_prompt_tokens_));
  scalar(out, "counter", "llmk_generation_tokens_total", "Tokens generated for completed samples.",
         static_cast<double>(num_generation_tokens_));
  const auto per_frontend = [&](const char* name, const char* help, uint64_t EmbeddingCounts::*field) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n";
    for (const auto& [frontend, counts] : embeddings_) {
      out += std::string(name) + "{frontend=\"" + frontend + "\"} " + std::to_string(counts.*field) + "\n";
    }
  };
  per_frontend("llmk_embedding_requests_total", "Embedding requests answered, by front end.",
               &EmbeddingCounts::requests);
  per_frontend("llmk_embedding_inputs_total", "Inputs embedded, by front end.", &EmbeddingCounts::inputs);
  per_frontend("llmk_embedding_prompt_tokens_total", "Tokens of the inputs embedded, by front end.",
               &EmbeddingCounts::prompt_tokens);
  ttft_.render("llmk_time_to_first_token_seconds", "Arrival to first token.", out);
  inter_token_.render("llmk_inter_token_latency_seconds", "Time between consecutive tokens of a request.", out);
  e2e_.render("llmk_e2e_request_latency_seconds", "Arrival to finish.", out);
  scalar(out, "gauge", "llmk_num_requests_running", "Sequences holding KV.", static_cast<double>(st.num_running));
  scalar(out, "gauge", "llmk_num_requests_waiting", "Requests queued, not yet admitted.",
         static_cast<double>(st.num_waiting));
  const double total = static_cast<double>(st.kv.total_slots);
  scalar(out, "gauge", "llmk_kv_cache_usage_ratio", "Reserved KV slots over capacity (0..1).",
         total > 0 ? static_cast<double>(st.kv.reserved_slots) / total : 0.0);
  scalar(out, "gauge", "llmk_kv_cache_used_slots", "KV slots holding live tokens.",
         static_cast<double>(st.kv.used_slots));
  scalar(out, "gauge", "llmk_kv_cache_total_slots", "KV capacity in token slots.", total);
  scalar(out, "counter", "llmk_num_preemptions_total", "Sequences preempted for lack of KV space.",
         static_cast<double>(st.num_preemptions));
  scalar(out, "counter", "llmk_engine_steps_total", "Engine steps run.", static_cast<double>(st.num_steps));
  scalar(out, "counter", "llmk_prefill_tokens_total",
         "Prompt tokens computed (prefix-cache hits and handed-off prompts are not; recomputations are).",
         static_cast<double>(st.num_prefill_tokens));
  scalar(out, "counter", "llmk_prefix_cache_query_tokens_total", "Prompt tokens looked up in the prefix cache.",
         static_cast<double>(st.kv.prefix_query_tokens));
  scalar(out, "counter", "llmk_prefix_cache_hit_tokens_total", "Of those, tokens found (KV reused, not computed).",
         static_cast<double>(st.kv.prefix_hit_tokens));
  out += "# HELP llmk_kv_handoffs_total Prefill/decode disaggregation: prompts' K/V handed to a decode replica "
         "(exported) or started from (imported).\n# TYPE llmk_kv_handoffs_total counter\n";
  out += "llmk_kv_handoffs_total{direction=\"exported\"} " + std::to_string(st.num_handoffs_exported) + "\n";
  out += "llmk_kv_handoffs_total{direction=\"imported\"} " + std::to_string(st.num_handoffs_imported) + "\n";
  scalar(out, "counter", "llmk_spec_decode_num_drafts_total", "Speculative decodes: drafts verified (vLLM's name).",
         static_cast<double>(st.num_spec_drafts));
  scalar(out, "counter", "llmk_spec_decode_num_draft_tokens_total", "Drafted tokens verified.",
         static_cast<double>(st.num_spec_draft_tokens));
  scalar(out, "counter", "llmk_spec_decode_num_accepted_tokens_total",
         "Drafted tokens accepted; mean acceptance length = 1 + accepted / drafts.",
         static_cast<double>(st.num_spec_accepted_tokens));
  return replica_name_.empty() ? out : with_replica_label(out, replica_name_);
}

}  // namespace llmk::ipc
