#include "apps/eval/compare.hpp"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>

namespace llmk::eval {
namespace {

// Removes the base's temporary logits file however the comparison ends.
struct TempFile {
  std::filesystem::path path;
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

}  // namespace

std::string quality_difference(const EngineConfig& a, const EngineConfig& b) {
  std::string out;
  auto add = [&out](const char* what) { out += (out.empty() ? "" : ", ") + std::string(what); };
  if (a.plugins.linear != b.plugins.linear || a.plugins.linear_options != b.plugins.linear_options ||
      a.plugins.linear_blocks != b.plugins.linear_blocks)
    add("linear plugin");
  if (a.kv_cache.dtype != b.kv_cache.dtype || a.kv_cache.group_size != b.kv_cache.group_size ||
      a.kv_cache.rotate_keys != b.kv_cache.rotate_keys)
    add("KV dtype");
  if (a.plugins.attention != b.plugins.attention || a.plugins.attention_options != b.plugins.attention_options)
    add("attention plugin");
  return out;
}

QualityComparison compare_quality(const std::vector<EngineConfig>& configs, const std::vector<std::string>& names,
                                  EvalSetup setup) {
  QualityComparison q;
  q.names = names;
  TempFile base{std::filesystem::temp_directory_path() /
                ("llmk-ab-" + std::to_string(static_cast<long long>(getpid())) + ".logits")};
  for (size_t k = 0; k < configs.size(); ++k) {
    setup.save_logits = k == 0 ? base.path.string() : "";
    setup.kl_base = k == 0 ? "" : base.path.string();
    std::fprintf(stderr, "ab: quality of %s over %s\n", names[k].c_str(), setup.text_name.c_str());
    q.reports.push_back(run_eval(configs[k], setup));
  }
  return q;
}

std::string format_quality(const QualityComparison& q) {
  if (q.reports.empty()) return "";
  const EvalReport& first = q.reports.front();
  const ChunkPlan& p = first.result.plan;
  char line[512];
  std::string out;
  std::snprintf(line, sizeof(line), "quality: %lld tokens scored (%d chunks of %d), KL and top-1 against %s\n",
                static_cast<long long>(first.result.nll.count), p.num_chunks, p.ctx, q.names.front().c_str());
  out += line;
  std::snprintf(line, sizeof(line), "  %-24s %20s %10s %10s %10s %8s\n", "config", "perplexity", "KL mean",
                "KL median", "KL max", "top-1 %");
  out += line;
  for (size_t k = 0; k < q.reports.size(); ++k) {
    const EvalResult& r = q.reports[k].result;
    char ppl[64];
    std::snprintf(ppl, sizeof(ppl), "%.4f +/- %.4f", perplexity(r.nll), perplexity_uncertainty(r.nll));
    if (k == 0)
      std::snprintf(line, sizeof(line), "  %-24s %20s %10s %10s %10s %8s\n", q.names[k].c_str(), ppl, "-", "-", "-",
                    "-");
    else
      std::snprintf(line, sizeof(line), "  %-24s %20s %10.6f %10.6f %10.6f %8.3f\n", q.names[k].c_str(), ppl,
                    r.kl.mean(), r.kl_median(), r.kl_max(), 100.0 * r.top1_agreement());
    out += line;
  }
  return out;
}

nlohmann::json quality_json(const QualityComparison& q) {
  nlohmann::json j = nlohmann::json::array();
  for (size_t k = 0; k < q.reports.size(); ++k) {
    nlohmann::json r = report_json(q.reports[k]);
    r["name"] = q.names[k];
    j.push_back(std::move(r));
  }
  return j;
}

}  // namespace llmk::eval
