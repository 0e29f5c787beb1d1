#include "apps/bench/workload.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <random>

#include "core/error.hpp"

namespace llmk::bench {
namespace {

int32_t parse_positive(const std::string& text, const std::string& option) {
  size_t used = 0;
  long value = 0;
  try {
    value = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < 1 || value > (1 << 24)) {
    throw Error(ErrorCode::invalid_argument, option + ": '" + text + "' is not a positive length");
  }
  return static_cast<int32_t>(value);
}

int32_t draw(std::mt19937_64& rng, LengthRange r) {
  if (r.min == r.max) return r.min;
  return std::uniform_int_distribution<int32_t>(r.min, r.max)(rng);
}

}  // namespace

LengthRange parse_length_range(const std::string& text, const std::string& option) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    const int32_t n = parse_positive(text, option);
    return {n, n};
  }
  LengthRange r{parse_positive(text.substr(0, colon), option), parse_positive(text.substr(colon + 1), option)};
  if (r.min > r.max) throw Error(ErrorCode::invalid_argument, option + ": range '" + text + "' has min > max");
  return r;
}

Arrival parse_arrival(const std::string& text) {
  if (text == "burst") return Arrival::burst;
  if (text == "fixed") return Arrival::fixed;
  if (text == "poisson") return Arrival::poisson;
  throw Error(ErrorCode::invalid_argument, "--arrival: '" + text + "' (allowed: burst, fixed, poisson)");
}

const char* to_string(Arrival a) {
  switch (a) {
    case Arrival::burst: return "burst";
    case Arrival::fixed: return "fixed";
    case Arrival::poisson: return "poisson";
  }
  return "?";
}

std::vector<double> make_arrivals(int32_t n, Arrival arrival, double rate, uint64_t seed) {
  std::vector<double> t(static_cast<size_t>(std::max(0, n)), 0.0);
  if (arrival == Arrival::burst || rate <= 0) return t;
  if (arrival == Arrival::fixed) {
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<double>(i) / rate;
    return t;
  }
  // Poisson process: the first request at 0, then exponential gaps. A
  // stream of its own so arrivals do not change when prompt lengths do.
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  std::exponential_distribution<double> gap(rate);
  for (size_t i = 1; i < t.size(); ++i) t[i] = t[i - 1] + gap(rng);
  return t;
}

std::vector<BenchRequest> make_workload(const WorkloadSpec& spec) {
  std::vector<BenchRequest> out;
  std::mt19937_64 rng(spec.seed);
  auto base_request = [&](size_t i) {
    Request r;
    r.id = spec.id_prefix + std::to_string(i);
    r.sampling.temperature = spec.temperature;
    r.sampling.seed = spec.seed + i;
    r.sampling.ignore_eos = spec.ignore_eos;
    return r;
  };

  if (!spec.prompts_file.empty()) {
    std::ifstream in(spec.prompts_file);
    if (!in) throw Error(ErrorCode::invalid_argument, "bench: cannot open prompts file '" + spec.prompts_file + "'");
    std::string line;
    std::vector<BenchRequest> file_requests;
    for (int line_no = 1; std::getline(in, line); ++line_no) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = spec.prompts_file + ":" + std::to_string(line_no);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const std::exception& e) {
        throw Error(ErrorCode::invalid_argument, where + ": not JSON (" + e.what() + ")");
      }
      BenchRequest b;
      b.request = base_request(file_requests.size());
      if (j.contains("prompt_token_ids")) {
        b.request.prompt_token_ids = j["prompt_token_ids"].get<std::vector<int32_t>>();
        b.num_prompt_tokens = static_cast<int32_t>(b.request.prompt_token_ids.size());
      } else if (j.contains("prompt") && j["prompt"].is_string()) {
        b.request.prompt = j["prompt"].get<std::string>();
      } else {
        throw Error(ErrorCode::invalid_argument, where + ": needs \"prompt\" (string) or \"prompt_token_ids\"");
      }
      b.request.sampling.max_tokens = j.contains("max_tokens") ? j["max_tokens"].get<int32_t>() : draw(rng, spec.output_len);
      file_requests.push_back(std::move(b));
    }
    if (file_requests.empty()) throw Error(ErrorCode::invalid_argument, "bench: no prompts in '" + spec.prompts_file + "'");
    // num_requests cycles through the file (0 or less: each line once).
    const size_t n = spec.num_requests > 0 ? static_cast<size_t>(spec.num_requests) : file_requests.size();
    for (size_t i = 0; i < n; ++i) {
      BenchRequest b = file_requests[i % file_requests.size()];
      b.request.id = spec.id_prefix + std::to_string(i);
      b.request.sampling.seed = spec.seed + i;
      out.push_back(std::move(b));
    }
  } else {
    const int32_t lo = spec.first_token_id, hi = spec.vocab_size - 1;
    if (hi < lo) throw Error(ErrorCode::invalid_argument, "bench: vocabulary too small for synthetic prompts");
    std::uniform_int_distribution<int32_t> token(lo, hi);
    std::vector<int32_t> prefix;
    for (int32_t i = 0; i < spec.shared_prefix_len; ++i) prefix.push_back(token(rng));
    for (int32_t i = 0; i < spec.num_requests; ++i) {
      BenchRequest b;
      b.request = base_request(static_cast<size_t>(i));
      const int32_t len = draw(rng, spec.input_len);
      b.request.sampling.max_tokens = draw(rng, spec.output_len);
      auto& ids = b.request.prompt_token_ids;
      if (spec.bos_token_id >= 0) ids.push_back(spec.bos_token_id);
      for (int32_t p : prefix) {
        if (static_cast<int32_t>(ids.size()) >= len) break;
        ids.push_back(p);
      }
      while (static_cast<int32_t>(ids.size()) < len) ids.push_back(token(rng));
      b.num_prompt_tokens = len;
      out.push_back(std::move(b));
    }
  }
  const auto arrivals = make_arrivals(static_cast<int32_t>(out.size()), spec.arrival, spec.request_rate, spec.seed);
  for (size_t i = 0; i < out.size(); ++i) out[i].arrival_s = arrivals[i];
  return out;
}

}  // namespace llmk::bench
