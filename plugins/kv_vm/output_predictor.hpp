// Predicts how much of its max_tokens budget a request will use, from the
// requests that finished before it: the q-quantile (default p90) of
// actual_output / max_tokens over a sliding window of recent requests.
// Before min_samples requests have finished it answers default_ratio.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

namespace llmk::kv {

class OutputPredictor {
 public:
  struct Options {
    double default_ratio = 0.5;
    double quantile = 0.9;
    uint32_t window = 256;
    uint32_t min_samples = 4;
  };

  explicit OutputPredictor(Options options) : options_(options) {}

  // A request finished having used `ratio` (0..1) of its output budget.
  void add(uint64_t seq_id, double ratio) {
    samples_.emplace_back(seq_id, std::clamp(ratio, 0.0, 1.0));
    if (samples_.size() > options_.window) samples_.pop_front();
    dirty_ = true;
  }

  // A sequence freed and then reserved again under the same id was preempted,
  // not finished: its sample would bias the prediction low.
  void withdraw(uint64_t seq_id) {
    for (auto it = samples_.rbegin(); it != samples_.rend(); ++it) {
      if (it->first == seq_id) {
        samples_.erase(std::next(it).base());
        dirty_ = true;
        return;
      }
    }
  }

  double ratio() const {
    if (samples_.size() < options_.min_samples || samples_.empty()) return options_.default_ratio;
    if (dirty_) {
      std::vector<double> sorted;
      sorted.reserve(samples_.size());
      for (const auto& s : samples_) sorted.push_back(s.second);
      std::sort(sorted.begin(), sorted.end());
      const double rank = std::ceil(options_.quantile * static_cast<double>(sorted.size()));
      const size_t index = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(sorted.size()))) - 1;
      cached_ = sorted[index];
      dirty_ = false;
    }
    return cached_;
  }

  // Slots to give a sequence of num_tokens that may grow to limit.
  uint32_t predict_capacity(uint32_t num_tokens, uint32_t limit) const {
    if (limit <= num_tokens) return num_tokens;
    const double extra = std::ceil(ratio() * static_cast<double>(limit - num_tokens));
    return num_tokens + static_cast<uint32_t>(std::min<double>(extra, limit - num_tokens));
  }

  size_t num_samples() const { return samples_.size(); }

 private:
  Options options_;
  std::deque<std::pair<uint64_t, double>> samples_;  // (seq_id, ratio), oldest first
  mutable bool dirty_ = true;
  mutable double cached_ = 0.0;
};

}  // namespace llmk::kv
