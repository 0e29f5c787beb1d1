#include "apps/bench/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace llmk::bench {

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(q, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

Distribution distribution(const std::vector<double>& values) {
  Distribution d;
  d.count = values.size();
  if (values.empty()) return d;
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  d.p50 = percentile(values, 50);
  d.p90 = percentile(values, 90);
  d.p99 = percentile(values, 99);
  d.max = *std::max_element(values.begin(), values.end());
  return d;
}

Summary summarize(const std::vector<RequestRecord>& records) {
  Summary s;
  std::vector<double> ttft, tpot, itl, e2e;
  double first_submit = std::numeric_limits<double>::infinity(), last_done = 0;
  for (const RequestRecord& r : records) {
    if (!r.ok()) {
      ++s.num_errors;
      continue;
    }
    ++s.num_ok;
    first_submit = std::min(first_submit, r.submit_s);
    last_done = std::max(last_done, r.done_s);
    s.num_prompt_tokens += static_cast<uint64_t>(std::max(0, r.num_prompt_tokens));
    s.num_output_tokens += static_cast<uint64_t>(std::max(0, r.num_output_tokens));
    const double end = r.token_times_s.empty() ? r.done_s : r.token_times_s.back();
    e2e.push_back(end - r.submit_s);
    if (r.token_times_s.empty()) continue;
    const double first = r.token_times_s.front();
    ttft.push_back(first - r.submit_s);
    const size_t n = r.token_times_s.size();
    if (n > 1) tpot.push_back((end - first) / static_cast<double>(n - 1));
    for (size_t i = 1; i < n; ++i) itl.push_back(r.token_times_s[i] - r.token_times_s[i - 1]);
  }
  if (s.num_ok > 0) s.duration_s = last_done - first_submit;
  if (s.duration_s > 0) {
    s.requests_per_s = static_cast<double>(s.num_ok) / s.duration_s;
    s.output_tokens_per_s = static_cast<double>(s.num_output_tokens) / s.duration_s;
    s.total_tokens_per_s = static_cast<double>(s.num_output_tokens + s.num_prompt_tokens) / s.duration_s;
  }
  s.ttft_s = distribution(ttft);
  s.tpot_s = distribution(tpot);
  s.itl_s = distribution(itl);
  s.e2e_s = distribution(e2e);
  return s;
}

}  // namespace llmk::bench
