#include "apps/bench/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace llmk::bench::svg {
namespace {

constexpr double W = 560, H = 300, LEFT = 64, RIGHT = 16, TOP = 36, BOTTOM = 56;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// A "nice" tick label: 3 significant digits at most.
std::string label(double v) {
  char buf[32];
  const double a = std::fabs(v);
  if (a == 0) return "0";
  if (a >= 1e6) std::snprintf(buf, sizeof buf, "%.3gM", v / 1e6);
  else if (a >= 1e4) std::snprintf(buf, sizeof buf, "%.3gk", v / 1e3);
  else if (a >= 100) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// Rounds up to 1, 2 or 5 times a power of ten.
double nice_max(double v) {
  if (!(v > 0)) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (v <= m * p) return m * p;
  }
  return 10 * p;
}

std::string frame(const std::string& title, double y_max, const std::string& y_label) {
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(W) + "\" height=\"" + num(H) +
                  "\" viewBox=\"0 0 " + num(W) + " " + num(H) + "\" font-family=\"sans-serif\" font-size=\"11\">";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>";
  s += "<text x=\"" + num(W / 2) + "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">" +
       escape(title) + "</text>";
  const double plot_h = H - TOP - BOTTOM;
  for (int i = 0; i <= 4; ++i) {
    const double y = TOP + plot_h * (1 - i / 4.0);
    s += "<line x1=\"" + num(LEFT) + "\" x2=\"" + num(W - RIGHT) + "\" y1=\"" + num(y) + "\" y2=\"" + num(y) +
         "\" stroke=\"#dddddd\"/>";
    s += "<text x=\"" + num(LEFT - 6) + "\" y=\"" + num(y + 4) + "\" text-anchor=\"end\">" + label(y_max * i / 4.0) +
         "</text>";
  }
  s += "<text transform=\"translate(14," + num(TOP + plot_h / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
       escape(y_label) + "</text>";
  s += "<line x1=\"" + num(LEFT) + "\" x2=\"" + num(LEFT) + "\" y1=\"" + num(TOP) + "\" y2=\"" + num(H - BOTTOM) +
       "\" stroke=\"#333333\"/>";
  s += "<line x1=\"" + num(LEFT) + "\" x2=\"" + num(W - RIGHT) + "\" y1=\"" + num(H - BOTTOM) + "\" y2=\"" +
       num(H - BOTTOM) + "\" stroke=\"#333333\"/>";
  return s;
}

std::string legend(const std::vector<std::string>& names) {
  std::string s;
  double x = LEFT;
  for (size_t i = 0; i < names.size(); ++i) {
    s += "<rect x=\"" + num(x) + "\" y=\"" + num(H - 16) + "\" width=\"10\" height=\"10\" fill=\"" + color(i) + "\"/>";
    s += "<text x=\"" + num(x + 14) + "\" y=\"" + num(H - 7) + "\">" + escape(names[i]) + "</text>";
    x += 24 + 7.0 * static_cast<double>(names[i].size());
  }
  return s;
}

}  // namespace

const char* color(size_t i) {
  static const char* palette[] = {"#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb"};
  return palette[i % 7];
}

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string bar_chart(const std::string& title, const std::vector<std::string>& categories,
                      const std::vector<std::string>& series_names, const std::vector<std::vector<double>>& values,
                      const std::string& unit) {
  double top = 0;
  for (const auto& row : values) {
    for (double v : row) top = std::max(top, v);
  }
  top = nice_max(top);
  std::string s = frame(title, top, unit);
  const double plot_w = W - LEFT - RIGHT, plot_h = H - TOP - BOTTOM;
  const double group_w = plot_w / static_cast<double>(std::max<size_t>(1, categories.size()));
  const double bar_w = group_w * 0.8 / static_cast<double>(std::max<size_t>(1, series_names.size()));
  for (size_t c = 0; c < categories.size(); ++c) {
    const double gx = LEFT + group_w * static_cast<double>(c) + group_w * 0.1;
    for (size_t k = 0; k < values.size(); ++k) {
      const double v = c < values[k].size() ? values[k][c] : 0;
      const double h = plot_h * v / top;
      const double x = gx + bar_w * static_cast<double>(k);
      s += "<rect x=\"" + num(x) + "\" y=\"" + num(TOP + plot_h - h) + "\" width=\"" + num(bar_w - 2) +
           "\" height=\"" + num(h) + "\" fill=\"" + color(k) + "\"><title>" + escape(series_names[k]) + ": " +
           label(v) + "</title></rect>";
      s += "<text x=\"" + num(x + bar_w / 2) + "\" y=\"" + num(TOP + plot_h - h - 3) +
           "\" text-anchor=\"middle\" font-size=\"10\">" + label(v) + "</text>";
    }
    s += "<text x=\"" + num(gx + group_w * 0.4) + "\" y=\"" + num(H - BOTTOM + 14) + "\" text-anchor=\"middle\">" +
         escape(categories[c]) + "</text>";
  }
  return s + legend(series_names) + "</svg>";
}

std::string line_chart(const std::string& title, const std::vector<Series>& series, const std::string& x_label,
                       const std::string& y_label) {
  double x_max = 0, y_max = 0;
  for (const auto& ser : series) {
    for (const auto& [x, y] : ser.points) {
      x_max = std::max(x_max, x);
      y_max = std::max(y_max, y);
    }
  }
  x_max = nice_max(x_max);
  y_max = nice_max(y_max);
  std::string s = frame(title, y_max, y_label);
  const double plot_w = W - LEFT - RIGHT, plot_h = H - TOP - BOTTOM;
  for (int i = 0; i <= 4; ++i) {
    const double x = LEFT + plot_w * i / 4.0;
    s += "<text x=\"" + num(x) + "\" y=\"" + num(H - BOTTOM + 14) + "\" text-anchor=\"middle\">" +
         label(x_max * i / 4.0) + "</text>";
  }
  s += "<text x=\"" + num(LEFT + plot_w / 2) + "\" y=\"" + num(H - BOTTOM + 28) + "\" text-anchor=\"middle\">" +
       escape(x_label) + "</text>";
  std::vector<std::string> names;
  for (size_t k = 0; k < series.size(); ++k) {
    names.push_back(series[k].name);
    std::string pts;
    for (const auto& [x, y] : series[k].points) {
      pts += num(LEFT + plot_w * x / x_max) + "," + num(TOP + plot_h * (1 - y / y_max)) + " ";
    }
    s += "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"" + std::string(color(k)) + "\" points=\"" + pts +
         "\"/>";
  }
  return s + legend(names) + "</svg>";
}

}  // namespace llmk::bench::svg
