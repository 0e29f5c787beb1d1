// Minimal SVG charts for the HTML reports: plain strings, fixed palette,
// axes with a handful of ticks. Nothing external is referenced.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace llmk::bench::svg {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
};

// Grouped bars: one group per category, one bar per series value.
// values[s][c] is series s in category c.
std::string bar_chart(const std::string& title, const std::vector<std::string>& categories,
                      const std::vector<std::string>& series_names, const std::vector<std::vector<double>>& values,
                      const std::string& unit);

std::string line_chart(const std::string& title, const std::vector<Series>& series, const std::string& x_label,
                       const std::string& y_label);

std::string escape(const std::string& text);  // for SVG and HTML text
const char* color(size_t i);

}  // namespace llmk::bench::svg
