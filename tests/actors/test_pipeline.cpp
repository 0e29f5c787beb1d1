// A request's walk through the five actors, as the actors themselves report
// it, and the trace that shows detokenizing step t overlapping step t+1.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <mutex>

#include "actors/messages.hpp"
#include "actors/trace.hpp"
#include "engine_fixture.hpp"

using namespace llmk;
using namespace llmk::test;

namespace {

struct Recorder {
  std::mutex mutex;
  std::vector<PipelineEvent> events;
  void operator()(const PipelineEvent& ev) {
    std::lock_guard<std::mutex> lock(mutex);
    events.push_back(ev);
  }
};

// Position of the first event matching actor/message (and step when > 0) at
// or after `from`; -1 if none.
long find(const std::vector<PipelineEvent>& events, const std::string& actor, const std::string& message,
          uint64_t step = 0, size_t from = 0) {
  for (size_t i = from; i < events.size(); ++i)
    if (events[i].actor == actor && events[i].message == message && (step == 0 || events[i].step == step))
      return static_cast<long>(i);
  return -1;
}

}  // namespace

TEST_CASE("one request walks through tokenizer, scheduler, executor, sampler, detokenizer and back", "[pipeline]") {
  const bool overlap = GENERATE(false, true);
  INFO("scheduler.overlap " << overlap);
  auto recorder = std::make_shared<Recorder>();
  EngineOptions options;
  options.observer = [recorder](const PipelineEvent& ev) { (*recorder)(ev); };
  Collector collector;
  const int32_t num_tokens = 4;
  {
    EngineConfig cfg = stories_config();
    cfg.scheduler.overlap = overlap;
    Engine engine(cfg, options);
    Request r;
    r.id = "walk";
    r.prompt = "Once upon a time";
    r.sampling.temperature = 0;
    r.sampling.max_tokens = num_tokens;
    engine.submit(r, collector.callback());
    REQUIRE(collector.wait_done(1, std::chrono::seconds(20)));
  }
  std::vector<PipelineEvent> ev;
  {
    std::lock_guard<std::mutex> lock(recorder->mutex);
    ev = recorder->events;
  }
  for (size_t i = 0; i < ev.size(); ++i) {
    INFO(i << ": " << ev[i].actor << " " << ev[i].message << " " << ev[i].request_id << " step " << ev[i].step);
    CHECK(ev[i].sequence == i);
  }
  // Admission: client → tokenizer → scheduler → detokenizer. The first step
  // may be planned before the detokenizer handles `open`, but `open` always
  // reaches it before the step's tokens.
  long submit = find(ev, "tokenizer", "submit");
  long enqueue = find(ev, "scheduler", "enqueue");
  long open = find(ev, "detokenizer", "open");
  REQUIRE(submit >= 0);
  REQUIRE(enqueue > submit);
  REQUIRE(open > enqueue);
  CHECK(open < find(ev, "detokenizer", "tokens"));
  CHECK(ev[size_t(submit)].request_id == "walk");
  CHECK(ev[size_t(enqueue)].request_id == "walk");

  // Each step: scheduler → executor → sampler → scheduler → detokenizer →
  // client. One prefill step then one decode step per further token.
  std::vector<uint64_t> steps;
  for (const auto& e : ev)
    if (e.actor == "scheduler" && e.message == "schedule") steps.push_back(e.step);
  REQUIRE(steps.size() == size_t(num_tokens));
  // The detokenizer's events and the client's callbacks, in the order they
  // happened: the client thread may record step t's event after the
  // detokenizer has already taken step t+1's tokens (that is the pipelining),
  // so the k-th client event is matched with the k-th detokenizer event.
  std::vector<long> detok_events, client_events;
  for (size_t i = 0; i < ev.size(); ++i) {
    if (ev[i].actor == "detokenizer" && ev[i].message == "event") detok_events.push_back(long(i));
    if (ev[i].actor == "client" && ev[i].message == "event") client_events.push_back(long(i));
  }
  REQUIRE(detok_events.size() == steps.size());
  REQUIRE(client_events.size() == steps.size());
  size_t k = 0;
  for (uint64_t step : steps) {
    INFO("step " << step);
    long schedule = find(ev, "scheduler", "schedule", step);
    long execute = find(ev, "executor", "execute", step);
    long sample = find(ev, "sampler", "sample", step);
    long done = find(ev, "scheduler", "step_done", step);
    long tokens = find(ev, "detokenizer", "tokens", step);
    REQUIRE(schedule > enqueue);
    CHECK(execute > schedule);
    CHECK(sample > execute);
    CHECK(done > sample);
    CHECK(tokens > done);
    CHECK(detok_events[k] > tokens);
    CHECK(client_events[k] > detok_events[k]);
    ++k;
  }
  for (size_t i = 1; i < steps.size(); ++i) {
    INFO("step " << steps[i]);
    CHECK(find(ev, "executor", "execute", steps[i]) > find(ev, "executor", "execute", steps[i - 1]));
    if (!overlap) {
      // One step in flight: each is planned from the previous one's tokens.
      CHECK(find(ev, "scheduler", "schedule", steps[i]) > find(ev, "scheduler", "step_done", steps[i - 1]));
    } else {
      // Planned ahead: step t+1 is sent before step t's tokens are back.
      CHECK(find(ev, "scheduler", "schedule", steps[i]) < find(ev, "scheduler", "step_done", steps[i - 1]));
    }
  }
  auto result = collector.results().at("walk");
  CHECK(result.sample().token_ids.size() == size_t(num_tokens));
  CHECK(result.num_done_events == 1);
}

TEST_CASE("the Chrome trace shows detokenizing a step while a later step executes", "[pipeline][trace]") {
  std::string path = std::string(LLMK_BINARY_DIR) + "/test_pipeline_trace.json";
  std::remove(path.c_str());
  EngineOptions options;
  options.trace_file = path;
  // Enough samples per step (128 requests x 2, all in one batch) that
  // detokenizing a step takes longer than waking the executor's thread for
  // the next one (~100 us on a loaded machine).
  EngineConfig cfg = stories_config();
  cfg.scheduler.max_num_seqs = 256;
  cfg.scheduler.max_num_batched_tokens = 4096;
  {
    Engine engine(cfg, options);
    Collector collector;
    const int num_requests = 128;
    for (int i = 0; i < num_requests; ++i) {
      Request r;
      r.id = "t" + std::to_string(i);
      r.prompt = i % 2 ? "Once upon a time" : "Tom had a red ball.";
      r.sampling.temperature = 0.8f;
      r.sampling.seed = uint64_t(i);
      r.sampling.max_tokens = 40;
      r.sampling.n = 2;
      r.sampling.ignore_eos = true;
      r.sampling.stop = {"zzzz", "qqqq", "xyzzy", "never ever"};  // the matcher runs on every token
      engine.submit(r, collector.callback());
    }
    REQUIRE(collector.wait_done(num_requests, std::chrono::seconds(30)));
  }  // the trace is written at shutdown
  std::ifstream in(path);
  REQUIRE(in);
  nlohmann::json doc = nlohmann::json::parse(in);
  struct Span {
    double start, end;
    uint64_t step;
  };
  std::map<std::string, std::vector<Span>> spans;
  std::map<int, std::string> track_names;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") track_names[e["tid"].get<int>()] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
    spans[e["name"].get<std::string>()].push_back({ts, ts + dur, e["args"]["step"].get<uint64_t>()});
  }
  for (const char* name : {"tokenize", "schedule", "execute", "sample", "detokenize"}) {
    INFO(name);
    CHECK(!spans[name].empty());
  }
  for (const char* track : {"tokenizer", "scheduler", "executor", "sampler", "detokenizer"}) {
    bool found = false;
    for (const auto& [tid, n] : track_names) found = found || n == track;
    CHECK(found);
  }
  int num_overlaps = 0;
  for (const auto& d : spans["detokenize"]) {
    if (d.step == 0) continue;
    for (const auto& x : spans["execute"])
      if (x.step > d.step && x.start < d.end && d.start < x.end) ++num_overlaps;
  }
  INFO(spans["detokenize"].size() << " detokenize spans, " << spans["execute"].size() << " execute spans");
  CHECK(num_overlaps > 0);
}

TEST_CASE("Engine::trace_spans gives the recorded spans of every step, and says when none are recorded", "[pipeline]") {
  EngineOptions options;
  options.record_trace = true;
  Engine engine(stories_config(), options);
  Collector collector;
  Request r;
  r.id = "spans";
  r.prompt_token_ids = {1, 403, 407, 261};
  r.sampling.temperature = 0;
  r.sampling.ignore_eos = true;
  r.sampling.max_tokens = 6;
  engine.submit(r, collector.callback());
  REQUIRE(collector.wait_done(1, std::chrono::seconds(20)));
  // One forward per token: the prompt's 4 rows, then 5 one-token steps; each sampled.
  std::map<uint64_t, int64_t> execute_rows;
  std::map<uint64_t, int> sampled;
  for (const TraceSpan& s : engine.trace_spans()) {
    CHECK(s.start_s <= s.end_s);
    if (s.name == "execute") execute_rows[s.step] = s.count;
    if (s.name == "sample") ++sampled[s.step];
  }
  REQUIRE(execute_rows.size() == 6);
  CHECK(execute_rows.begin()->second == 4);
  for (auto it = std::next(execute_rows.begin()); it != execute_rows.end(); ++it) CHECK(it->second == 1);
  for (const auto& [step, rows] : execute_rows) CHECK(sampled[step] == 1);

  Engine untraced(stories_config());
  CHECK_THROWS_AS(untraced.trace_spans(), Error);
}

TEST_CASE("with overlap, the executor publishes the ids of steps whose rows all take the raw argmax; other steps "
          "wait for the sampler; the tokens are the same either way", "[pipeline][overlap]") {
  // Per step: did the executor take the argmax? And the request's tokens.
  auto run = [](bool overlap, float repetition_penalty, float temperature) {
    EngineConfig cfg = stories_config();
    cfg.executor.num_threads = 2;  // the argmax cut between two threads
    cfg.scheduler.overlap = overlap;
    EngineOptions options;
    options.record_trace = true;
    Engine engine(cfg, options);
    Request r;
    r.id = "argmax";
    r.prompt_token_ids = {1, 403, 407, 261};
    r.sampling.temperature = temperature;
    r.sampling.repetition_penalty = repetition_penalty;
    r.sampling.seed = 5;
    r.sampling.ignore_eos = true;
    r.sampling.max_tokens = 24;
    const RequestResult result = run_one(engine, r);
    std::set<uint64_t> steps, argmax_steps;
    for (const TraceSpan& span : engine.trace_spans()) {
      if (span.name == "execute") steps.insert(span.step);
      if (span.name == "argmax") argmax_steps.insert(span.step);
    }
    return std::make_tuple(result.samples.at(0).token_ids, steps.size(), argmax_steps.size());
  };
  const auto [greedy_ids, greedy_steps, greedy_argmax] = run(true, 1.0f, 0.0f);
  REQUIRE(greedy_ids.size() == 24);
  CHECK(greedy_steps == 24);
  CHECK(greedy_argmax == 24);  // every step, the prefill's last row included
  // The same request without overlap: the sampler picks every id, and the same ones.
  const auto [serial_ids, serial_steps, serial_argmax] = run(false, 1.0f, 0.0f);
  CHECK(serial_argmax == 0);
  CHECK(serial_ids == greedy_ids);
  // A penalty or a temperature leaves every id to the sampler.
  const auto [penalized_ids, penalized_steps, penalized_argmax] = run(true, 1.3f, 0.0f);
  CHECK(penalized_steps == 24);
  CHECK(penalized_argmax == 0);
  CHECK(penalized_ids.size() == 24);
  const auto [sampled_ids, sampled_steps, sampled_argmax] = run(true, 1.0f, 0.8f);
  CHECK(sampled_argmax == 0);
  CHECK(sampled_ids.size() == 24);
}

TEST_CASE("a program's own actors can feed the tokenizer actor and consume the events", "[pipeline][embed]") {
  Engine engine(stories_config());
  caf::actor_system& system = engine.system();
  Collector collector;
  // Behind the pipeline: a user actor receiving RequestEvents.
  // Spawn arguments rather than captures: CAF 0.17 dereferences a null
  // argument tuple for an actor spawned without arguments.
  auto consumer = system.spawn(
      [](caf::event_based_actor*, Collector* sink) -> caf::behavior {
        return {[sink](RequestEvent& ev) { sink->take(ev); }};
      },
      &collector);
  // In front: a user actor that rewrites the prompt before the tokenizer sees it.
  caf::actor tokenizer = engine.tokenizer_actor();
  auto rewriter = system.spawn(
      [](caf::event_based_actor* self, caf::actor tokenizer, caf::actor consumer) -> caf::behavior {
        return {[=](submit_atom, Request& r) {
          r.prompt = "Once upon a " + r.prompt;
          self->send(tokenizer, submit_atom::value, std::move(r), consumer);
        }};
      },
      tokenizer, consumer);
  Request r;
  r.id = "embedded";
  r.prompt = "time";
  r.sampling.temperature = 0;
  r.sampling.max_tokens = 48;
  caf::anon_send(rewriter, submit_atom::value, r);
  REQUIRE(collector.wait_done(1, std::chrono::seconds(20)));
  caf::anon_send_exit(rewriter, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(consumer, caf::exit_reason::user_shutdown);
  auto golden = load_golden();  // case 1 is "Once upon a time"
  const auto results = collector.results();
  const SampleResult& s = results.at("embedded").sample();
  CHECK(s.token_ids == golden[1].greedy_ids);
  CHECK(s.text == golden[1].greedy_text);
}
