// Reports: the comparison verdict counts differing requests and tokens, the
// HTML page is self-contained, and headless Chromium renders it to a
// screenshot that is not blank.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "apps/bench/report.hpp"
#include "render_check.hpp"
#include "support/skip.hpp"

using namespace llmk;
using namespace llmk::bench;
using namespace llmk::test;
namespace fs = std::filesystem;

namespace {

// A run of n requests whose figures scale with `speed`; output ids 0..4
// except where `corrupt` says (request index -> token position).
RunResult synthetic_run(int n, double speed, std::map<int, int> corrupt = {}) {
  RunResult r;
  for (int i = 0; i < n; ++i) {
    RequestRecord rec;
    rec.id = "req-" + std::to_string(i);
    rec.submit_s = 0.01 * i;
    for (int k = 0; k < 5; ++k) {
      rec.token_times_s.push_back(rec.submit_s + (0.05 + 0.001 * i + 0.01 * k) / speed);
      rec.output_ids.push_back(k);
    }
    if (auto it = corrupt.find(i); it != corrupt.end()) rec.output_ids[it->second] = 99;
    rec.done_s = rec.token_times_s.back();
    rec.num_prompt_tokens = 16;
    rec.num_output_tokens = 5;
    rec.finish_reason = FinishReason::length;
    r.records.push_back(rec);
  }
  r.summary = summarize(r.records);
  r.have_stats = true;
  for (int t = 0; t <= 20; ++t) r.kv_samples.push_back({0.01 * t, 0.02 * t * speed / 2, 0.03 * t, 4, 0});
  r.kv_peak_used_fraction = 0.4 * speed / 2;
  return r;
}

}  // namespace

TEST_CASE("output comparison counts differing requests and tokens", "[report]") {
  const RunResult a = synthetic_run(10, 1.0);
  CHECK(compare_outputs(a, synthetic_run(10, 2.0)).identical());
  const OutputDiff d = compare_outputs(a, synthetic_run(10, 1.0, {{3, 1}, {7, 4}}));
  CHECK_FALSE(d.identical());
  CHECK(d.num_requests_compared == 10);
  CHECK(d.num_requests_differing == 2);
  CHECK(d.num_tokens_compared == 50);
  CHECK(d.num_tokens_differing == 2);
  CHECK(d.first_differing_ids == std::vector<std::string>{"req-3", "req-7"});
  RunResult shorter = synthetic_run(10, 1.0);
  shorter.records[0].output_ids.pop_back();
  CHECK(compare_outputs(a, shorter).num_tokens_differing == 1);
}

TEST_CASE("the comparison table shows B/A ratios and the verdict", "[report]") {
  std::vector<Contender> cs{{"paged", "plugins: {kv_allocator: kv.paged}", synthetic_run(10, 1.0)},
                            {"vm", "plugins: {kv_allocator: kv.vm}", synthetic_run(10, 2.0)}};
  const std::string table = format_comparison(cs, {compare_outputs(cs[0].result, cs[1].result)});
  INFO(table);
  // Twice as fast everywhere: latencies halve, throughput about doubles.
  CHECK(std::regex_search(table, std::regex(R"(TTFT p50 ms\s+\S+\s+\S+\s+0\.500)")));
  CHECK(table.find("greedy outputs identical: vm = paged on all 10 requests (50 tokens)") != std::string::npos);
}

namespace {

std::string two_contender_report() {
  std::vector<Contender> cs{{"kv.contiguous", "plugins:\n  kv_allocator: kv.contiguous\n", synthetic_run(40, 1.0)},
                            {"kv.paged", "plugins:\n  kv_allocator: kv.paged\n", synthetic_run(40, 1.5, {{5, 2}})}};
  return html_report("llmk ab <test>", "40 requests", cs, {compare_outputs(cs[0].result, cs[1].result)});
}

}  // namespace

TEST_CASE("the HTML report is self-contained", "[report]") {
  const std::string html = two_contender_report();
  CHECK(html.find("<svg") != std::string::npos);
  CHECK(html.find("KV cache used over time") != std::string::npos);
  CHECK(html.find("greedy outputs DIFFER") != std::string::npos);
  CHECK(html.find("llmk ab &lt;test&gt;") != std::string::npos);
  // Nothing is fetched: no src/href attributes, no url(...), no @import.
  CHECK_FALSE(std::regex_search(html, std::regex(R"((src|href)\s*=|url\(|@import)", std::regex::icase)));
}

TEST_CASE("Chromium renders the HTML report", "[report][chromium]") {
  const std::string chromium = chromium_path();
  if (chromium.empty()) LLMK_SKIP("chromium is not installed (scripts/setup.sh installs it)");
  const std::string html = two_contender_report();
  const fs::path dir = fs::temp_directory_path() / ("llmk_report_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path page = dir / "report.html", shot = dir / "report.png", blank = dir / "blank.html",
                 blank_shot = dir / "blank.png";
  std::ofstream(page) << html;
  std::ofstream(blank) << "<!DOCTYPE html><html><body></body></html>";

  const std::string log = screenshot(page, shot, dir / "profile");
  INFO("chromium: " << log);
  REQUIRE(fs::exists(shot));
  screenshot(blank, blank_shot, dir / "profile");
  REQUIRE(fs::exists(blank_shot));
  // The page's screenshot holds many colours (bars, lines, text) and a
  // good share of non-white pixels; the blank page's holds one colour.
  const PngStats page_stats = png_stats(shot), blank_stats = png_stats(blank_shot);
  CHECK(page_stats.width == 1200);
  CHECK(page_stats.height == 1600);
  CHECK(blank_stats.num_colours == 1);
  CHECK(page_stats.num_colours > 50);
  CHECK(page_stats.non_white_fraction > 0.03);
  CHECK(fs::file_size(shot) > 3 * fs::file_size(blank_shot));
  if (const char* keep = std::getenv("LLMK_KEEP_REPORT")) {  // for looking at it
    fs::copy_file(page, fs::path(keep) / "report.html", fs::copy_options::overwrite_existing);
    fs::copy_file(shot, fs::path(keep) / "report.png", fs::copy_options::overwrite_existing);
  }
  fs::remove_all(dir);
}
