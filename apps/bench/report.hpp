// Presenting benchmark results: a readable table, JSON, and the comparison
// (`llmk ab`) as a table with ratios and a self-contained HTML page whose
// charts are inline SVG (no scripts, fonts or stylesheets from anywhere).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "apps/bench/runner.hpp"

namespace llmk::bench {

std::string format_table(const RunResult& r);
nlohmann::json to_json(const RunResult& r, bool with_records = true);

// One configuration's run in a comparison.
struct Contender {
  std::string name;          // e.g. the config file's name
  std::string config_text;   // what was applied (shown in the report)
  RunResult result;
};

// Greedy-output equality of every contender against the first, by request id.
struct OutputDiff {
  size_t num_requests_compared = 0;
  size_t num_requests_differing = 0;
  size_t num_tokens_compared = 0;
  size_t num_tokens_differing = 0;     // positions that differ, plus length differences
  std::vector<std::string> first_differing_ids;  // up to 5
  bool identical() const { return num_requests_differing == 0 && num_requests_compared > 0; }
};
OutputDiff compare_outputs(const RunResult& a, const RunResult& b);

// Side-by-side metrics, a B/A ratio column per later contender, and the
// output verdicts.
std::string format_comparison(const std::vector<Contender>& contenders, const std::vector<OutputDiff>& diffs);
nlohmann::json comparison_json(const std::vector<Contender>& contenders, const std::vector<OutputDiff>& diffs);
std::string html_report(const std::string& title, const std::string& workload_text,
                        const std::vector<Contender>& contenders, const std::vector<OutputDiff>& diffs);

}  // namespace llmk::bench
