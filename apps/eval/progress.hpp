// Progress of a long run on stderr: one line redrawn in place on a
// terminal, or one plain line per update when stderr is a file or pipe.
#pragma once

#include <cstdint>
#include <string>

namespace llmk::eval {

class Progress {
 public:
  // `label` starts every line.
  explicit Progress(std::string label);
  // Steps done of `total`, seconds so far, and a short note (e.g. the running perplexity).
  void update(int64_t done, int64_t total, double seconds, const std::string& note);
  // Ends the redrawn line (a newline on a terminal); nothing otherwise.
  void finish();

 private:
  std::string label_;
  bool tty_ = false;
  bool drawn_ = false;
};

}  // namespace llmk::eval
