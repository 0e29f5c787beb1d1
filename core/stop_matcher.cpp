#include "core/stop_matcher.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace llmk {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings)
    : stop_strings_(std::move(stop_strings)) {
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    if (stop_strings_[i].empty()) {
      throw Error(ErrorCode::invalid_argument, "stop string " + std::to_string(i) + " is empty");
    }
  }
}

StopStringMatcher::Result StopStringMatcher::push(std::string_view delta) {
  Result result;
  if (stopped()) {
    result.stopped = true;
    return result;
  }
  held_.append(delta);
  if (stop_strings_.empty()) {
    result.text.swap(held_);
    return result;
  }

  // The match that completes first; among those ending at the same byte,
  // the longest (it starts earliest). This makes the result independent of
  // how the text was split into deltas.
  size_t match_pos = std::string::npos, match_end = std::string::npos;
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    const size_t pos = held_.find(stop_strings_[i]);
    if (pos == std::string::npos) continue;
    const size_t end = pos + stop_strings_[i].size();
    if (end < match_end || (end == match_end && pos < match_pos)) {
      match_pos = pos;
      match_end = end;
      stopped_index_ = static_cast<int>(i);
    }
  }
  if (match_pos != std::string::npos) {
    result.text = held_.substr(0, match_pos);
    result.stopped = true;
    held_.clear();
    return result;
  }

  // No match: hold the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  const std::string_view buffer = held_;
  for (const auto& stop : stop_strings_) {
    const size_t longest = std::min(stop.size() - 1, buffer.size());
    for (size_t k = longest; k > keep; --k) {
      if (buffer.substr(buffer.size() - k) == std::string_view(stop).substr(0, k)) {
        keep = k;
        break;
      }
    }
  }
  result.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return result;
}

std::string StopStringMatcher::flush() {
  std::string out;
  if (!stopped()) out.swap(held_);
  held_.clear();
  return out;
}

}  // namespace llmk
