#include "apps/batch_file.hpp"

#include <stdexcept>

namespace llmk::app {

namespace {

template <class T>
T field(const nlohmann::json& j, const char* key) {
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw std::invalid_argument(std::string("\"") + key + "\" has the wrong type");
  }
}

nlohmann::json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"cached_prompt_tokens", u.cached_prompt_tokens}};
}

nlohmann::json timings_json(const Timings& t) {
  return {{"queue_s", t.queue_s}, {"time_to_first_token_s", t.time_to_first_token_s}, {"e2e_s", t.e2e_s}};
}

}  // namespace

Request parse_batch_line(const std::string& line, int line_number, const Request& defaults) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("not JSON: ") + e.what());
  }
  if (!j.is_object()) throw std::invalid_argument("not a JSON object");
  Request r = defaults;
  r.id = "line-" + std::to_string(line_number);
  bool has_prompt = false;
  for (const auto& [key, value] : j.items()) {
    const char* k = key.c_str();
    if (key == "id") {
      r.id = value.is_string() ? value.get<std::string>() : value.dump();
    } else if (key == "prompt") {
      r.prompt = field<std::string>(j, k);
      has_prompt = true;
    } else if (key == "max_tokens") {
      r.sampling.max_tokens = field<int32_t>(j, k);
    } else if (key == "temperature") {
      r.sampling.temperature = field<float>(j, k);
    } else if (key == "top_p") {
      r.sampling.top_p = field<float>(j, k);
    } else if (key == "top_k") {
      r.sampling.top_k = field<int32_t>(j, k);
    } else if (key == "seed") {
      if (!value.is_number_integer()) throw std::invalid_argument("\"seed\" must be an integer");
      r.sampling.seed = value.get<uint64_t>();
    } else if (key == "stop") {
      if (value.is_string())
        r.sampling.stop = {value.get<std::string>()};
      else
        r.sampling.stop = field<std::vector<std::string>>(j, k);
    } else if (key == "n") {
      r.sampling.n = field<int32_t>(j, k);
    } else if (key == "ignore_eos") {
      r.sampling.ignore_eos = field<bool>(j, k);
    } else if (key == "logprobs") {
      r.sampling.logprobs = field<int32_t>(j, k);
    } else {
      throw std::invalid_argument("unknown key \"" + key + "\"");
    }
  }
  if (!has_prompt) throw std::invalid_argument("\"prompt\" is missing");
  return r;
}

void BatchResult::add(const RequestEvent& event) {
  Sample& s = samples[event.index];
  s.text += event.text_delta;
  s.token_ids.insert(s.token_ids.end(), event.token_ids.begin(), event.token_ids.end());
  if (event.finished) {
    s.finish_reason = event.finish_reason;
    s.error = event.error;
    s.usage = event.usage;
    s.timings = event.timings;
  }
}

nlohmann::json BatchResult::to_json() const {
  nlohmann::json j = {{"id", id}};
  if (!error.empty() || samples.empty()) {
    j["finish_reason"] = "error";
    j["error"] = error.empty() ? "no result" : error;
    return j;
  }
  auto sample_json = [](const Sample& s) {
    nlohmann::json o = {{"text", s.text},
                        {"token_ids", s.token_ids},
                        {"finish_reason", to_string(s.finish_reason)},
                        {"usage", usage_json(s.usage)},
                        {"timings", timings_json(s.timings)}};
    if (!s.error.empty()) o["error"] = s.error;
    return o;
  };
  if (samples.size() == 1 && samples.begin()->first == 0) {
    j.update(sample_json(samples.begin()->second));
    return j;
  }
  nlohmann::json choices = nlohmann::json::array();
  Usage total;
  Timings timings;
  for (const auto& [index, s] : samples) {
    nlohmann::json c = sample_json(s);
    c["index"] = index;
    choices.push_back(std::move(c));
    total.prompt_tokens = s.usage.prompt_tokens;
    total.cached_prompt_tokens = s.usage.cached_prompt_tokens;
    total.completion_tokens += s.usage.completion_tokens;
    if (s.timings.e2e_s >= timings.e2e_s) timings = s.timings;
  }
  j["choices"] = std::move(choices);
  j["usage"] = usage_json(total);
  j["timings"] = timings_json(timings);
  return j;
}

}  // namespace llmk::app
