#include "apps/eval/progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <utility>

namespace llmk::eval {

namespace {
constexpr int kBarWidth = 30;
}

Progress::Progress(std::string label) : label_(std::move(label)), tty_(isatty(STDERR_FILENO) != 0) {}

void Progress::update(int64_t done, int64_t total, double seconds, const std::string& note) {
  const double frac = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  const double eta = done > 0 ? seconds / static_cast<double>(done) * static_cast<double>(total - done) : 0.0;
  if (!tty_) {
    std::fprintf(stderr, "%s: %lld/%lld, %.1f s, eta %.0f s, %s\n", label_.c_str(), static_cast<long long>(done),
                 static_cast<long long>(total), seconds, eta, note.c_str());
    return;
  }
  const int filled = static_cast<int>(frac * kBarWidth + 0.5);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kBarWidth - filled), '.');
  std::fprintf(stderr, "\r\033[K%s [%s] %lld/%lld  %.1f s  eta %.0f s  %s", label_.c_str(), bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total), seconds, eta, note.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::finish() {
  if (tty_ && drawn_) std::fputc('\n', stderr);
  drawn_ = false;
}

}  // namespace llmk::eval
