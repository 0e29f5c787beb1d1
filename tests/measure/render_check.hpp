// Renders an HTML file with headless Chromium (when installed) and reads
// back simple statistics of the screenshot through png_stats.py.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>

#include "support/command.hpp"

namespace llmk::test {

inline std::string run_capture(const std::string& cmd) { return run_command(cmd).out; }

inline std::string chromium_path() {
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (std::filesystem::exists(c)) return c;
  }
  return "";
}

// Screenshot of `html` at 1200x1600 into `png`, offline; returns Chromium's output.
inline std::string screenshot(const std::filesystem::path& html, const std::filesystem::path& png,
                              const std::filesystem::path& profile_dir) {
  const std::string cmd = "timeout 120 " + chromium_path() +
                          " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
                          " --disable-background-networking --disable-component-update --disable-sync"
                          " --user-data-dir=" + profile_dir.string() + " --screenshot=" + png.string() +
                          " --window-size=1200,1600 file://" + std::filesystem::absolute(html).string() + " 2>&1";
  return run_capture(cmd);
}

struct PngStats {
  int width = 0, height = 0, num_colours = 0;
  double non_white_fraction = 0;
};

inline PngStats png_stats(const std::filesystem::path& png) {
  const std::string script = std::string(LLMK_SOURCE_DIR) + "/tests/measure/png_stats.py";
  std::istringstream in(run_capture("/usr/bin/python3 " + script + " " + png.string()));
  PngStats s;
  in >> s.width >> s.height >> s.num_colours >> s.non_white_fraction;
  return s;
}

}  // namespace llmk::test
