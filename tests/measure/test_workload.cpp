// Workloads: exact synthetic prompt lengths, ranges, shared prefixes, JSONL
// prompts, and seeded arrivals (fixed and Poisson statistics).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "apps/bench/workload.hpp"
#include "core/error.hpp"

using namespace llmk;
using namespace llmk::bench;

TEST_CASE("synthetic prompts have exactly the requested token lengths", "[workload]") {
  WorkloadSpec spec;
  spec.num_requests = 50;
  spec.input_len = {16, 512};
  spec.output_len = {16, 64};
  spec.vocab_size = 512;
  const auto w = make_workload(spec);
  REQUIRE(w.size() == 50);
  std::set<int32_t> lengths;
  for (const auto& b : w) {
    const auto& ids = b.request.prompt_token_ids;
    CHECK(static_cast<int32_t>(ids.size()) == b.num_prompt_tokens);
    CHECK(b.num_prompt_tokens >= 16);
    CHECK(b.num_prompt_tokens <= 512);
    CHECK(ids.front() == 1);  // BOS
    for (size_t i = 1; i < ids.size(); ++i) {
      CHECK(ids[i] >= 3);
      CHECK(ids[i] < 512);
    }
    CHECK(b.request.sampling.max_tokens >= 16);
    CHECK(b.request.sampling.max_tokens <= 64);
    CHECK(b.request.sampling.ignore_eos);
    CHECK(b.request.sampling.temperature == 0);
    CHECK(b.arrival_s == 0);
    lengths.insert(b.num_prompt_tokens);
  }
  CHECK(lengths.size() > 20);  // really drawn from the range
}

TEST_CASE("the same spec and seed give the same workload; another seed another", "[workload]") {
  WorkloadSpec spec;
  spec.num_requests = 20;
  spec.input_len = {8, 64};
  spec.seed = 42;
  const auto a = make_workload(spec), b = make_workload(spec);
  spec.seed = 43;
  const auto c = make_workload(spec);
  bool all_same = true, any_diff = false;
  for (size_t i = 0; i < a.size(); ++i) {
    all_same = all_same && a[i].request.prompt_token_ids == b[i].request.prompt_token_ids &&
               a[i].request.id == b[i].request.id;
    any_diff = any_diff || a[i].request.prompt_token_ids != c[i].request.prompt_token_ids;
  }
  CHECK(all_same);
  CHECK(any_diff);
}

TEST_CASE("a shared prefix is common to every synthetic prompt", "[workload]") {
  WorkloadSpec spec;
  spec.num_requests = 8;
  spec.input_len = {100, 100};
  spec.shared_prefix_len = 64;
  const auto w = make_workload(spec);
  for (const auto& b : w) {
    CHECK(b.request.prompt_token_ids.size() == 100);
    CHECK(std::equal(b.request.prompt_token_ids.begin(), b.request.prompt_token_ids.begin() + 65,
                     w[0].request.prompt_token_ids.begin()));  // BOS + 64
  }
  CHECK(w[0].request.prompt_token_ids[80] != w[1].request.prompt_token_ids[80]);
}

TEST_CASE("length ranges parse from N and MIN:MAX and refuse nonsense", "[workload]") {
  CHECK(parse_length_range("128", "--input-len").min == 128);
  const LengthRange r = parse_length_range("16:512", "--input-len");
  CHECK(r.min == 16);
  CHECK(r.max == 512);
  CHECK_THROWS_AS(parse_length_range("512:16", "--input-len"), Error);
  CHECK_THROWS_AS(parse_length_range("0", "--input-len"), Error);
  CHECK_THROWS_AS(parse_length_range("12x", "--input-len"), Error);
  CHECK_THROWS_WITH(parse_arrival("gamma"), Catch::Contains("burst, fixed, poisson"));
}

TEST_CASE("JSONL prompts are read with their max_tokens and cycled", "[workload]") {
  const auto file = std::filesystem::temp_directory_path() / "llmk_bench_prompts.jsonl";
  {
    std::ofstream out(file);
    out << R"({"prompt": "Once upon a time", "max_tokens": 7})" << "\n\n";
    out << R"({"prompt_token_ids": [1, 5, 6]})" << "\n";
  }
  WorkloadSpec spec;
  spec.prompts_file = file.string();
  spec.num_requests = 3;
  spec.output_len = {9, 9};
  const auto w = make_workload(spec);
  REQUIRE(w.size() == 3);
  CHECK(w[0].request.prompt == "Once upon a time");
  CHECK(w[0].request.sampling.max_tokens == 7);
  CHECK(w[1].request.prompt_token_ids == std::vector<int32_t>{1, 5, 6});
  CHECK(w[1].num_prompt_tokens == 3);
  CHECK(w[1].request.sampling.max_tokens == 9);
  CHECK(w[2].request.prompt == "Once upon a time");
  CHECK(w[2].request.id != w[0].request.id);
  {
    std::ofstream out(file);
    out << "{\"prompt\": \"ok\"}\n{broken\n";
  }
  CHECK_THROWS_WITH(make_workload(spec), Catch::Contains(":2: not JSON"));
  std::filesystem::remove(file);
}

TEST_CASE("fixed arrivals are evenly spaced and burst arrivals all at zero", "[arrivals]") {
  const auto fixed = make_arrivals(5, Arrival::fixed, 4.0, 0);
  CHECK(fixed == std::vector<double>{0, 0.25, 0.5, 0.75, 1.0});
  const auto burst = make_arrivals(5, Arrival::burst, 4.0, 0);
  CHECK(burst == std::vector<double>(5, 0.0));
}

TEST_CASE("Poisson arrivals have exponential gaps of mean 1/rate, reproducible by seed", "[arrivals]") {
  const int n = 20000;
  const double rate = 50;
  const auto t = make_arrivals(n, Arrival::poisson, rate, 7);
  std::vector<double> gaps;
  for (int i = 1; i < n; ++i) gaps.push_back(t[i] - t[i - 1]);
  const double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / gaps.size();
  double var = 0;
  for (double g : gaps) var += (g - mean) * (g - mean);
  var /= gaps.size() - 1;
  // Standard error of the mean gap is (1/rate)/sqrt(n) = 0.7%: 3% is > 4 sigma.
  CHECK(mean == Approx(1 / rate).epsilon(0.03));
  CHECK(std::sqrt(var) / mean == Approx(1.0).epsilon(0.04));  // exponential: CV = 1
  // P(gap > mean) = e^-1 for an exponential distribution.
  const double above = std::count_if(gaps.begin(), gaps.end(), [&](double g) { return g > 1 / rate; }) / double(gaps.size());
  CHECK(above == Approx(std::exp(-1.0)).margin(0.015));
  // Requests in 1-second windows: Poisson(50), variance = mean.
  std::vector<int> counts(static_cast<size_t>(t.back()) + 1, 0);
  for (double x : t) ++counts[static_cast<size_t>(x)];
  counts.pop_back();  // partial last window
  const double cm = std::accumulate(counts.begin(), counts.end(), 0.0) / counts.size();
  double cv = 0;
  for (int c : counts) cv += (c - cm) * (c - cm);
  cv /= counts.size() - 1;
  CHECK(cv / cm == Approx(1.0).epsilon(0.2));
  CHECK(make_arrivals(n, Arrival::poisson, rate, 7) == t);
  CHECK(make_arrivals(n, Arrival::poisson, rate, 8) != t);
  CHECK(t[0] == 0);
}
