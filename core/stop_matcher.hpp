// Stop strings over streamed text: what may be shown now, and when to stop.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace llmk {

// Consumes text deltas (from IncrementalDetokenizer) and returns the text
// that is safe to emit now. Text that could be the beginning of a stop
// string is held back (the longest suffix that is a prefix of some stop
// string) until it either completes a stop string or can no longer do so.
// A stop string may span any number of deltas. The match is the occurrence
// that completes first (the longest one when several end at the same byte),
// as if the text arrived byte by byte; the text before it is released, the match and everything after it are
// dropped, and the matcher stays stopped (later pushes return nothing).
//
// Cost per push: O((held + delta) * total stop length); held is shorter
// than the longest stop string. Holding back at a stop-string prefix never
// splits a UTF-8 character when the stop strings are valid UTF-8.
class StopStringMatcher {
 public:
  struct Result {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string completed (now or earlier)
  };

  // Throws Error(invalid_argument) for an empty stop string.
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  Result push(std::string_view delta);
  // End of the stream: releases whatever is held (nothing once stopped).
  std::string flush();

  bool stopped() const { return stopped_index_ >= 0; }
  // The stop string that matched (its index in the constructor's list), -1 if none.
  int matched_index() const { return stopped_index_; }
  size_t num_held_bytes() const { return held_.size(); }
  bool empty() const { return stop_strings_.empty(); }

 private:
  std::vector<std::string> stop_strings_;
  std::string held_;
  int stopped_index_ = -1;
};

}  // namespace llmk
