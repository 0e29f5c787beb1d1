#include "apps/bench/report.hpp"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>

#include "apps/bench/svg.hpp"

namespace llmk::bench {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

nlohmann::json dist_json(const Distribution& d) {
  return {{"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}, {"max", d.max}, {"count", d.count}};
}

std::string dist_row(const char* name, const Distribution& d) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "  %-6s %10.2f %10.2f %10.2f %10.2f %10.2f\n", name, d.mean * 1e3, d.p50 * 1e3,
                d.p90 * 1e3, d.p99 * 1e3, d.max * 1e3);
  return buf;
}

// One comparable figure of a run: its name, value, and whether larger is better.
struct Metric {
  std::string name;
  std::function<double(const RunResult&)> value;
  const char* format;
};

const std::vector<Metric>& metrics() {
  static const std::vector<Metric> m{
      {"requests/s", [](const RunResult& r) { return r.summary.requests_per_s; }, "%.2f"},
      {"output tok/s", [](const RunResult& r) { return r.summary.output_tokens_per_s; }, "%.1f"},
      {"total tok/s", [](const RunResult& r) { return r.summary.total_tokens_per_s; }, "%.1f"},
      {"TTFT mean ms", [](const RunResult& r) { return r.summary.ttft_s.mean * 1e3; }, "%.2f"},
      {"TTFT p50 ms", [](const RunResult& r) { return r.summary.ttft_s.p50 * 1e3; }, "%.2f"},
      {"TTFT p99 ms", [](const RunResult& r) { return r.summary.ttft_s.p99 * 1e3; }, "%.2f"},
      {"TPOT mean ms", [](const RunResult& r) { return r.summary.tpot_s.mean * 1e3; }, "%.2f"},
      {"TPOT p99 ms", [](const RunResult& r) { return r.summary.tpot_s.p99 * 1e3; }, "%.2f"},
      {"ITL p50 ms", [](const RunResult& r) { return r.summary.itl_s.p50 * 1e3; }, "%.2f"},
      {"ITL p99 ms", [](const RunResult& r) { return r.summary.itl_s.p99 * 1e3; }, "%.2f"},
      {"E2E p50 ms", [](const RunResult& r) { return r.summary.e2e_s.p50 * 1e3; }, "%.1f"},
      {"E2E p99 ms", [](const RunResult& r) { return r.summary.e2e_s.p99 * 1e3; }, "%.1f"},
      {"KV peak used %", [](const RunResult& r) { return r.kv_peak_used_fraction * 100; }, "%.1f"},
      {"KV peak reserved %", [](const RunResult& r) { return r.kv_peak_reserved_fraction * 100; }, "%.1f"},
      {"peak running", [](const RunResult& r) { return static_cast<double>(r.peak_running); }, "%.0f"},
      {"mean batch seqs", [](const RunResult& r) { return r.mean_batch_seqs; }, "%.2f"},
      {"preemptions", [](const RunResult& r) { return static_cast<double>(r.num_preemptions); }, "%.0f"},
      {"relocations", [](const RunResult& r) { return static_cast<double>(r.num_relocations); }, "%.0f"},
      {"prefill tokens", [](const RunResult& r) { return static_cast<double>(r.num_prefill_tokens); }, "%.0f"},
      {"errors", [](const RunResult& r) { return static_cast<double>(r.summary.num_errors); }, "%.0f"},
  };
  return m;
}

// (llmk::to_string(FinishReason) lives with the Engine; the bench library
// does not need it.)
const char* finish_name(FinishReason r) {
  switch (r) {
    case FinishReason::none: return "none";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
  }
  return "?";
}

std::string ratio(double b, double a) { return a != 0 ? fmt("%.3f", b / a) : (b == 0 ? "=" : "-"); }

std::string verdict(const OutputDiff& d, const std::string& a, const std::string& b) {
  if (d.identical()) {
    return "greedy outputs identical: " + b + " = " + a + " on all " + std::to_string(d.num_requests_compared) +
           " requests (" + std::to_string(d.num_tokens_compared) + " tokens)";
  }
  std::string s = "greedy outputs DIFFER: " + b + " vs " + a + ": " + std::to_string(d.num_requests_differing) + " of " +
                  std::to_string(d.num_requests_compared) + " requests, " + std::to_string(d.num_tokens_differing) +
                  " of " + std::to_string(d.num_tokens_compared) + " tokens";
  if (!d.first_differing_ids.empty()) {
    s += " (first:";
    for (const auto& id : d.first_differing_ids) s += " " + id;
    s += ")";
  }
  return s;
}

std::vector<std::pair<double, double>> percentile_curve(const std::vector<RequestRecord>& records,
                                                        const std::function<bool(const RequestRecord&, double&)>& get) {
  std::vector<double> v;
  for (const auto& r : records) {
    double x;
    if (r.ok() && get(r, x)) v.push_back(x * 1e3);
  }
  std::vector<std::pair<double, double>> pts;
  if (v.empty()) return pts;
  for (int q = 0; q <= 100; q += 2) pts.emplace_back(q, percentile(v, q));
  return pts;
}

}  // namespace

std::string format_table(const RunResult& r) {
  const Summary& s = r.summary;
  std::string out;
  out += "requests      " + std::to_string(s.num_ok) + " ok, " + std::to_string(s.num_errors) + " errors, " +
         fmt("%.2f s", s.duration_s) + "\n";
  out += "throughput    " + fmt("%.2f req/s, ", s.requests_per_s) + fmt("%.1f output tok/s, ", s.output_tokens_per_s) +
         fmt("%.1f total tok/s", s.total_tokens_per_s) + "\n";
  out += "tokens        " + std::to_string(s.num_prompt_tokens) + " prompt, " + std::to_string(s.num_output_tokens) +
         " output\n";
  out += "latency (ms)       mean        p50        p90        p99        max\n";
  out += dist_row("TTFT", s.ttft_s);
  out += dist_row("TPOT", s.tpot_s);
  out += dist_row("ITL", s.itl_s);
  out += dist_row("E2E", s.e2e_s);
  if (r.have_stats) {
    out += "server        KV peak " + fmt("%.1f%% used", r.kv_peak_used_fraction * 100) +
           fmt(" (%.1f%% reserved), ", r.kv_peak_reserved_fraction * 100) + "peak running " +
           std::to_string(r.peak_running) + fmt(", mean batch %.2f seqs, ", r.mean_batch_seqs) +
           std::to_string(r.num_preemptions) + " preemptions, " + std::to_string(r.num_relocations) +
           " relocations, " + std::to_string(r.num_prefill_tokens) + " prefill tokens\n";
    if (r.num_spec_drafts > 0)
      out += "speculative   " + std::to_string(r.num_spec_drafts) + " drafts, " +
             std::to_string(r.num_spec_accepted_tokens) + " of " + std::to_string(r.num_spec_draft_tokens) +
             fmt(" drafted tokens accepted (%.1f%%), ", 100.0 * static_cast<double>(r.num_spec_accepted_tokens) /
                                                           static_cast<double>(std::max<uint64_t>(1, r.num_spec_draft_tokens))) +
             fmt("mean acceptance length %.2f\n", r.mean_acceptance_length());
  } else {
    out += "server        no stats from this target\n";
  }
  for (const auto& rec : r.records) {
    if (!rec.ok()) {
      out += "first error   " + rec.id + ": " + rec.error + "\n";
      break;
    }
  }
  return out;
}

nlohmann::json to_json(const RunResult& r, bool with_records) {
  const Summary& s = r.summary;
  nlohmann::json j = {{"num_ok", s.num_ok},
                      {"num_errors", s.num_errors},
                      {"duration_s", s.duration_s},
                      {"num_prompt_tokens", s.num_prompt_tokens},
                      {"num_output_tokens", s.num_output_tokens},
                      {"requests_per_s", s.requests_per_s},
                      {"output_tokens_per_s", s.output_tokens_per_s},
                      {"total_tokens_per_s", s.total_tokens_per_s},
                      {"ttft_s", dist_json(s.ttft_s)},
                      {"tpot_s", dist_json(s.tpot_s)},
                      {"itl_s", dist_json(s.itl_s)},
                      {"e2e_s", dist_json(s.e2e_s)}};
  if (r.have_stats) {
    j["server"] = {{"kv_peak_used_fraction", r.kv_peak_used_fraction},
                   {"kv_peak_reserved_fraction", r.kv_peak_reserved_fraction},
                   {"peak_running", r.peak_running},
                   {"mean_batch_seqs", r.mean_batch_seqs},
                   {"num_steps", r.num_steps},
                   {"num_preemptions", r.num_preemptions},
                   {"num_relocations", r.num_relocations},
                   {"num_prefill_tokens", r.num_prefill_tokens},
                   {"num_spec_drafts", r.num_spec_drafts},
                   {"num_spec_draft_tokens", r.num_spec_draft_tokens},
                   {"num_spec_accepted_tokens", r.num_spec_accepted_tokens},
                   {"mean_acceptance_length", r.mean_acceptance_length()}};
    nlohmann::json samples = nlohmann::json::array();
    for (const auto& k : r.kv_samples) {
      samples.push_back({k.time_s, k.used_fraction, k.reserved_fraction, k.num_running, k.num_waiting});
    }
    j["kv_samples"] = {{"columns", {"time_s", "used_fraction", "reserved_fraction", "num_running", "num_waiting"}},
                       {"rows", samples}};
  }
  if (with_records) {
    nlohmann::json recs = nlohmann::json::array();
    for (const auto& rec : r.records) {
      nlohmann::json x = {{"id", rec.id},
                          {"submit_s", rec.submit_s},
                          {"prompt_tokens", rec.num_prompt_tokens},
                          {"output_tokens", rec.num_output_tokens},
                          {"finish_reason", finish_name(rec.finish_reason)}};
      if (!rec.token_times_s.empty()) {
        x["ttft_s"] = rec.token_times_s.front() - rec.submit_s;
        x["e2e_s"] = rec.token_times_s.back() - rec.submit_s;
      }
      if (!rec.error.empty()) x["error"] = rec.error;
      recs.push_back(std::move(x));
    }
    j["requests"] = std::move(recs);
  }
  return j;
}

OutputDiff compare_outputs(const RunResult& a, const RunResult& b) {
  OutputDiff d;
  std::map<std::string, const RequestRecord*> by_id;
  for (const auto& r : a.records) by_id[r.id] = &r;
  for (const auto& rb : b.records) {
    auto it = by_id.find(rb.id);
    if (it == by_id.end()) continue;
    const RequestRecord& ra = *it->second;
    ++d.num_requests_compared;
    const size_t n = std::max(ra.output_ids.size(), rb.output_ids.size());
    size_t differing = 0;
    for (size_t i = 0; i < n; ++i) {
      if (i >= ra.output_ids.size() || i >= rb.output_ids.size() || ra.output_ids[i] != rb.output_ids[i]) ++differing;
    }
    d.num_tokens_compared += n;
    d.num_tokens_differing += differing;
    if (differing > 0 || !ra.ok() || !rb.ok()) {
      ++d.num_requests_differing;
      if (d.first_differing_ids.size() < 5) d.first_differing_ids.push_back(rb.id);
    }
  }
  return d;
}

std::string format_comparison(const std::vector<Contender>& cs, const std::vector<OutputDiff>& diffs) {
  std::string out;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%-20s", "");
  out += buf;
  for (const auto& c : cs) {
    std::snprintf(buf, sizeof buf, " %14s", c.name.substr(0, 14).c_str());
    out += buf;
  }
  for (size_t k = 1; k < cs.size(); ++k) {
    char head[24] = "B/A";
    if (k > 1) std::snprintf(head, sizeof head, "#%zu/A", k + 1);
    std::snprintf(buf, sizeof buf, " %9s", head);
    out += buf;
  }
  out += "\n";
  for (const Metric& m : metrics()) {
    std::snprintf(buf, sizeof buf, "%-20s", m.name.c_str());
    out += buf;
    for (const auto& c : cs) {
      std::snprintf(buf, sizeof buf, " %14s", fmt(m.format, m.value(c.result)).c_str());
      out += buf;
    }
    for (size_t k = 1; k < cs.size(); ++k) {
      std::snprintf(buf, sizeof buf, " %9s", ratio(m.value(cs[k].result), m.value(cs[0].result)).c_str());
      out += buf;
    }
    out += "\n";
  }
  for (size_t k = 1; k < cs.size(); ++k) out += verdict(diffs[k - 1], cs[0].name, cs[k].name) + "\n";
  return out;
}

nlohmann::json comparison_json(const std::vector<Contender>& cs, const std::vector<OutputDiff>& diffs) {
  nlohmann::json j = {{"contenders", nlohmann::json::array()}, {"output_diffs", nlohmann::json::array()}};
  for (const auto& c : cs) j["contenders"].push_back({{"name", c.name}, {"config", c.config_text}, {"result", to_json(c.result)}});
  for (size_t k = 0; k < diffs.size(); ++k) {
    const auto& d = diffs[k];
    j["output_diffs"].push_back({{"a", cs[0].name},
                                 {"b", cs[k + 1].name},
                                 {"identical", d.identical()},
                                 {"num_requests_compared", d.num_requests_compared},
                                 {"num_requests_differing", d.num_requests_differing},
                                 {"num_tokens_compared", d.num_tokens_compared},
                                 {"num_tokens_differing", d.num_tokens_differing},
                                 {"first_differing_ids", d.first_differing_ids}});
  }
  return j;
}

std::string html_report(const std::string& title, const std::string& workload_text, const std::vector<Contender>& cs,
                        const std::vector<OutputDiff>& diffs) {
  using svg::escape;
  std::vector<std::string> names;
  for (const auto& c : cs) names.push_back(c.name);
  std::string h = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + escape(title) + "</title>\n<style>"
                  "body{font-family:sans-serif;margin:24px;color:#222;background:#fff}"
                  "table{border-collapse:collapse;margin:12px 0}td,th{border:1px solid #ccc;padding:3px 10px;text-align:right}"
                  "th:first-child,td:first-child{text-align:left}.ok{color:#1a7f37;font-weight:bold}"
                  ".bad{color:#c62828;font-weight:bold}pre{background:#f5f5f5;padding:8px;font-size:12px}"
                  ".charts{display:flex;flex-wrap:wrap}.charts svg{margin:8px;border:1px solid #eee}</style></head><body>\n";
  h += "<h1>" + escape(title) + "</h1>\n<p>" + escape(workload_text) + "</p>\n";
  for (size_t k = 1; k < cs.size(); ++k) {
    const bool same = diffs[k - 1].identical();
    h += "<p class=\"" + std::string(same ? "ok" : "bad") + "\">" + escape(verdict(diffs[k - 1], cs[0].name, cs[k].name)) +
         "</p>\n";
  }
  h += "<table><tr><th>metric</th>";
  for (const auto& c : cs) h += "<th>" + escape(c.name) + "</th>";
  for (size_t k = 1; k < cs.size(); ++k) h += "<th>" + escape(cs[k].name) + " / " + escape(cs[0].name) + "</th>";
  h += "</tr>\n";
  for (const Metric& m : metrics()) {
    h += "<tr><td>" + escape(m.name) + "</td>";
    for (const auto& c : cs) h += "<td>" + fmt(m.format, m.value(c.result)) + "</td>";
    for (size_t k = 1; k < cs.size(); ++k) h += "<td>" + ratio(m.value(cs[k].result), m.value(cs[0].result)) + "</td>";
    h += "</tr>\n";
  }
  h += "</table>\n<div class=\"charts\">\n";

  std::vector<std::vector<double>> tput;
  for (const auto& c : cs) tput.push_back({c.result.summary.output_tokens_per_s, c.result.summary.total_tokens_per_s});
  h += svg::bar_chart("Throughput", {"output tokens/s", "total tokens/s"}, names, tput, "tokens/s") + "\n";
  std::vector<std::vector<double>> lat;
  for (const auto& c : cs) {
    const Summary& s = c.result.summary;
    lat.push_back({s.ttft_s.p50 * 1e3, s.ttft_s.p90 * 1e3, s.ttft_s.p99 * 1e3, s.e2e_s.p50 * 1e3, s.e2e_s.p90 * 1e3,
                   s.e2e_s.p99 * 1e3});
  }
  h += svg::bar_chart("Latency percentiles", {"TTFT p50", "TTFT p90", "TTFT p99", "E2E p50", "E2E p90", "E2E p99"},
                      names, lat, "ms") + "\n";
  auto curves = [&](const char* chart_title, const std::function<bool(const RequestRecord&, double&)>& get) {
    std::vector<svg::Series> series;
    for (const auto& c : cs) series.push_back({c.name, percentile_curve(c.result.records, get)});
    return svg::line_chart(chart_title, series, "percentile", "ms") + "\n";
  };
  h += curves("TTFT by percentile", [](const RequestRecord& r, double& x) {
    if (r.token_times_s.empty()) return false;
    x = r.token_times_s.front() - r.submit_s;
    return true;
  });
  h += curves("TPOT by percentile", [](const RequestRecord& r, double& x) {
    const size_t n = r.token_times_s.size();
    if (n < 2) return false;
    x = (r.token_times_s.back() - r.token_times_s.front()) / static_cast<double>(n - 1);
    return true;
  });
  std::vector<svg::Series> kv;
  for (const auto& c : cs) {
    svg::Series s{c.name, {}};
    for (const auto& k : c.result.kv_samples) s.points.emplace_back(k.time_s, k.used_fraction * 100);
    kv.push_back(std::move(s));
  }
  h += svg::line_chart("KV cache used over time", kv, "seconds", "% of slots") + "\n";
  h += "</div>\n";
  for (const auto& c : cs) h += "<h3>" + escape(c.name) + "</h3><pre>" + escape(c.config_text) + "</pre>\n";
  h += "</body></html>\n";
  return h;
}

}  // namespace llmk::bench
