// The Engine's request contract: validation errors and overload as one error
// event, stop strings across token boundaries, seeds, n > 1, logprobs,
// cancellation under load, and a clean shutdown with requests in flight.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <thread>
#include <tuple>

#include "core/grammar.hpp"
#include "engine_fixture.hpp"

using namespace llmk;
using namespace llmk::test;

namespace {

Request text_request(const std::string& id, const std::string& prompt, int32_t max_tokens) {
  Request r;
  r.id = id;
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  return r;
}

}  // namespace

TEST_CASE("invalid requests are answered by one finished error event", "[engine][validation]") {
  EngineConfig cfg = stories_config();
  cfg.kv_cache.max_seq_len = 64;
  Engine engine(cfg);
  // Each case with the request field its error names (the front ends'
  // OpenAI "param"), "" where the fault is no one field's.
  std::vector<std::tuple<std::string, std::string, Request>> cases;
  auto add = [&](const std::string& what, const std::string& field, auto change) {
    Request r = text_request(what, "Once upon a time", 4);
    change(r);
    cases.emplace_back(what, field, r);
  };
  add("empty prompt", "", [](Request& r) { r.prompt.clear(); });
  add("negative temperature", "temperature", [](Request& r) { r.sampling.temperature = -0.5f; });
  add("top_p zero", "top_p", [](Request& r) { r.sampling.top_p = 0.0f; });
  add("top_p above one", "top_p", [](Request& r) { r.sampling.top_p = 1.5f; });
  add("n zero", "n", [](Request& r) { r.sampling.n = 0; });
  add("max_tokens zero", "max_tokens", [](Request& r) { r.sampling.max_tokens = 0; });
  add("prompt too long", "", [](Request& r) { r.prompt_token_ids.assign(64, 300); });
  add("token id outside the vocabulary", "", [](Request& r) { r.prompt_token_ids = {1, 9999}; });
  if (structured_outputs_available())  // refused by the grammar compiler, in the tokenizer actor
    add("a regex XGrammar cannot parse", "structured_outputs.regex", [](Request& r) {
      auto s = std::make_shared<StructuredOutput>();
      s->kind = GrammarKind::regex;
      s->text = "a((";
      s->field = "structured_outputs.regex";
      r.sampling.structured = s;
    });
  for (auto& [what, field, request] : cases) {
    INFO(what);
    RequestResult r = run_one(engine, request);
    REQUIRE(r.samples.size() == 1);
    CHECK(r.sample().finish_reason == FinishReason::error);
    CHECK(!r.sample().error.empty());
    CHECK(r.sample().error_code == ErrorCode::invalid_argument);
    CHECK(r.sample().error_field == field);
    CHECK(r.sample().token_ids.empty());
  }
  // The engine still serves valid requests afterwards.
  CHECK(run_one(engine, text_request("valid", "Once upon a time", 4)).sample().finish_reason == FinishReason::length);
}

TEST_CASE("requests beyond the waiting queue's capacity are refused as overloaded", "[engine][validation]") {
  EngineConfig cfg = stories_config();
  cfg.scheduler.max_queue = 2;
  cfg.scheduler.max_num_seqs = 1;
  Engine engine(cfg);
  Collector collector;
  const int num_requests = 24;
  for (int i = 0; i < num_requests; ++i)
    engine.submit(text_request("r" + std::to_string(i), "Once upon a time", 40), collector.callback());
  REQUIRE(collector.wait_done(num_requests, std::chrono::seconds(30)));
  int num_refused = 0, num_served = 0;
  for (const auto& [id, r] : collector.results()) {
    CHECK(r.num_done_events == 1);
    if (r.sample().finish_reason == FinishReason::error) {
      ++num_refused;
      CHECK(r.sample().error_code == ErrorCode::overloaded);
      CHECK(r.sample().token_ids.empty());
    } else {
      ++num_served;
      CHECK(r.sample().token_ids.size() == 40);
    }
  }
  CHECK(num_refused > 0);
  CHECK(num_served >= 2);
}

TEST_CASE("a stop string split across tokens ends the text before the match", "[engine][stop]") {
  Engine engine(stories_config());
  RequestResult full = run_one(engine, text_request("full", "Once upon a time", 40));
  const std::string& text = full.sample().text;
  REQUIRE(text.find("little girl") != std::string::npos);
  // "le gi" spans the tokens of "little" and " girl".
  for (const std::string stop : {"le gi", "Lily.", ", there"}) {
    INFO("stop '" << stop << "'");
    Request r = text_request("stopped", "Once upon a time", 40);
    r.sampling.stop = {"never appears", stop};
    RequestResult got = run_one(engine, r);
    CHECK(got.sample().finish_reason == FinishReason::stop);
    CHECK(got.sample().text == text.substr(0, text.find(stop)));
    CHECK(got.sample().usage.completion_tokens < 40);
    CHECK(got.sample().usage.completion_tokens == static_cast<int32_t>(got.sample().token_ids.size()));
    // The tokens streamed are a prefix of the unstopped run.
    auto& ids = got.sample().token_ids;
    CHECK(std::equal(ids.begin(), ids.end(), full.sample().token_ids.begin()));
  }
}

TEST_CASE("a seed gives the same sampled output alone and among other requests", "[engine][sampling]") {
  Engine engine(stories_config());
  auto seeded = [](const std::string& id, uint64_t seed) {
    Request r = text_request(id, "Tom had a red ball.", 32);
    r.sampling.temperature = 1.0f;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = seed;
    return r;
  };
  auto alone = run_one(engine, seeded("a", 42)).sample().token_ids;
  CHECK(run_one(engine, seeded("b", 42)).sample().token_ids == alone);

  Collector collector;
  for (int i = 0; i < 12; ++i) engine.submit(seeded("other" + std::to_string(i), 100 + i), collector.callback());
  engine.submit(seeded("c", 42), collector.callback());
  REQUIRE(collector.wait_done(13, std::chrono::seconds(30)));
  auto results = collector.results();
  CHECK(results.at("c").sample().token_ids == alone);
  int num_different = 0;
  for (int i = 0; i < 12; ++i) num_different += results.at("other" + std::to_string(i)).sample().token_ids != alone;
  CHECK(num_different >= 10);
}

TEST_CASE("n > 1 samples share one prompt and finish independently", "[engine][sampling]") {
  Engine engine(stories_config());
  Request r = text_request("n3", "Sue said, \"Can I play too?\"", 24);
  r.sampling.n = 3;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 7;
  RequestResult got = run_one(engine, r);
  REQUIRE(got.samples.size() == 3);
  for (const auto& [index, s] : got.samples) {
    INFO("sample " << index);
    CHECK(s.finished);
    CHECK(s.token_ids.size() <= 24);
    CHECK(s.usage.prompt_tokens > 0);
  }
  CHECK((got.sample(0).token_ids != got.sample(1).token_ids || got.sample(1).token_ids != got.sample(2).token_ids));
  // Same seed, same three samples.
  r.id = "n3-again";
  RequestResult again = run_one(engine, r);
  for (int i = 0; i < 3; ++i) CHECK(again.sample(i).token_ids == got.sample(i).token_ids);

  // Greedy samples all follow the golden path.
  auto golden = load_golden();
  Request greedy = golden_request(golden[1], "n2-greedy");
  greedy.sampling.n = 2;
  RequestResult g = run_one(engine, greedy);
  CHECK(g.sample(0).token_ids == golden[1].greedy_ids);
  CHECK(g.sample(1).token_ids == golden[1].greedy_ids);
}

TEST_CASE("logprobs through the engine match the golden logits", "[engine][sampling]") {
  auto golden = load_golden();
  Engine engine(stories_config());
  Request r = golden_request(golden[2], "lp");
  r.sampling.max_tokens = 6;
  r.sampling.logprobs = 3;
  RequestResult got = run_one(engine, r);
  const SampleResult& s = got.sample();
  REQUIRE(s.logprobs.size() == s.token_ids.size());
  for (size_t i = 0; i < s.logprobs.size(); ++i) {
    INFO("token " << i);
    CHECK(s.logprobs[i].token_id == s.token_ids[i]);
    REQUIRE(s.logprobs[i].top.size() == 3);
    CHECK(s.logprobs[i].top[0].first == s.token_ids[i]);  // greedy: the best one
    CHECK(s.logprobs[i].top[0].second >= s.logprobs[i].top[1].second);
    CHECK(s.logprobs[i].logprob <= 0.0f);
  }
  // The first token's logprob is the float64 log-softmax of the golden logits.
  const auto& logits = golden[2].last_logits;
  double max = *std::max_element(logits.begin(), logits.end()), sum = 0;
  for (float x : logits) sum += std::exp(double(x) - max);
  double expected = double(logits[size_t(s.token_ids[0])]) - max - std::log(sum);
  CHECK(s.logprobs[0].logprob == Approx(expected).margin(1e-3));
}

TEST_CASE("random cancellations under load lose no request, answer none twice and free all KV",
          "[engine][cancel]") {
  EngineConfig cfg = stories_config();
  cfg.kv_cache.capacity_tokens = 2048;
  Engine engine(cfg);
  std::mt19937 rng(3);
  Collector collector;
  const int num_requests = 48;
  std::vector<std::string> ids;
  for (int i = 0; i < num_requests; ++i) {
    Request r = text_request("r" + std::to_string(i), i % 2 ? "Tom had a red ball." : "The sun was hot", 64 + i);
    r.sampling.n = i % 5 == 0 ? 2 : 1;
    r.sampling.temperature = 0.7f;
    ids.push_back(r.id);
    engine.submit(std::move(r), collector.callback());
    if (rng() % 4 == 0) engine.cancel(ids[rng() % ids.size()]);
  }
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 5));
    engine.cancel(ids[rng() % ids.size()]);
  }
  REQUIRE(collector.wait_done(num_requests, std::chrono::seconds(60)));
  CHECK_FALSE(engine.cancel("r0"));  // finished: unknown
  int num_cancelled = 0;
  for (const auto& [id, r] : collector.results()) {
    INFO(id);
    CHECK(r.violations.empty());
    CHECK(r.num_done_events == 1);
    for (const auto& [index, s] : r.samples) {
      CHECK(s.finished);
      CHECK(s.finish_reason != FinishReason::error);
      num_cancelled += s.finish_reason == FinishReason::cancelled;
    }
  }
  CHECK(collector.results().size() == size_t(num_requests));
  CHECK(num_cancelled > 0);
  EngineStats stats = engine.stats();
  CHECK(stats.num_running == 0);
  CHECK(stats.num_waiting == 0);
  CHECK(stats.kv.used_slots == 0);
  CHECK(stats.kv.num_seqs == 0);
  CHECK(stats.num_requests_finished == stats.num_requests_total);
}

TEST_CASE("destroying the engine with requests in flight cancels them and does not hang", "[engine][shutdown]") {
  Collector collector;
  const int num_requests = 24;
  {
    Engine engine(stories_config());
    for (int i = 0; i < num_requests; ++i) {
      Request r = text_request("r" + std::to_string(i), "Once upon a time", 400);
      r.sampling.ignore_eos = true;
      engine.submit(std::move(r), collector.callback());
    }
    auto stream = engine.submit(text_request("streamed", "Once upon a time", 400));
    CHECK(stream->next(std::chrono::seconds(10)).has_value());  // generation has started
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(collector.num_done() == size_t(num_requests));
  int num_cancelled = 0;
  for (const auto& [id, r] : collector.results()) {
    CHECK(r.num_done_events == 1);
    CHECK(r.violations.empty());
    num_cancelled += r.sample().finish_reason == FinishReason::cancelled;
  }
  CHECK(num_cancelled > 0);
}

TEST_CASE("an event stream delivers one request's events in order and ends after request_done", "[engine]") {
  Engine engine(stories_config());
  auto stream = engine.submit(text_request("s", "Once upon a time", 8));
  std::vector<RequestEvent> events;
  while (auto ev = stream->next(std::chrono::seconds(10))) events.push_back(*ev);
  REQUIRE(!events.empty());
  CHECK(events.back().request_done);
  CHECK(events.back().finish_reason == FinishReason::length);
  int32_t num_tokens = 0;
  for (const auto& ev : events) num_tokens += static_cast<int32_t>(ev.token_ids.size());
  CHECK(num_tokens == 8);
  CHECK(events.back().usage.completion_tokens == 8);
  CHECK(events.back().timings.token_times_s.size() == 8);
  CHECK(events.back().timings.time_to_first_token_s <= events.back().timings.e2e_s);
  CHECK_FALSE(stream->next(std::chrono::milliseconds(1)).has_value());
}
