#include "actors/trace.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include "core/error.hpp"

namespace llmk {

double now_s() {
  static const auto epoch = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch).count();
}

Tracer::Tracer(bool record_spans, Observer observer)
    : record_spans_(record_spans), observer_(std::move(observer)) {
  now_s();  // fixes the epoch before the first span
}

void Tracer::add_span(TraceSpan span) {
  if (!record_spans_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  spans_.push_back(std::move(span));
}

void Tracer::observe(const std::string& actor, const std::string& message, const std::string& request_id,
                     uint64_t step) {
  if (!observer_) return;
  PipelineEvent event{0, actor, message, request_id, step};
  {
    // The sequence number and the call share the lock so that the observer
    // sees events in sequence order.
    std::lock_guard<std::mutex> lock(mutex_);
    event.sequence = next_sequence_++;
    observer_(event);
  }
}

std::vector<TraceSpan> Tracer::spans() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return spans_;
}

std::string Tracer::chrome_trace_json() const {
  // One track (tid) per actor, in pipeline order; unknown tracks after them.
  static const char* order[] = {"tokenizer", "scheduler", "executor", "sampler", "detokenizer"};
  std::map<std::string, int> tids;
  for (int i = 0; i < 5; ++i) tids[order[i]] = i + 1;
  nlohmann::json events = nlohmann::json::array();
  auto spans_copy = spans();
  for (const auto& s : spans_copy) {
    if (!tids.count(s.track)) tids[s.track] = static_cast<int>(tids.size()) + 1;
  }
  for (const auto& [track, tid] : tids) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", tid}, {"args", {{"name", track}}}});
    events.push_back(
        {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 1}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
  }
  for (const auto& s : spans_copy) {
    events.push_back({{"name", s.name},
                      {"cat", "pipeline"},
                      {"ph", "X"},
                      {"pid", 1},
                      {"tid", tids[s.track]},
                      {"ts", s.start_s * 1e6},
                      {"dur", (s.end_s - s.start_s) * 1e6},
                      {"args", {{"step", s.step}, {"count", s.count}, {"thread", s.thread}}}});
  }
  nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  return doc.dump();
}

void Tracer::write_chrome_trace(const std::string& path) const {
  std::ofstream out(path);
  if (!out) throw Error(ErrorCode::invalid_argument, "cannot write trace file '" + path + "'");
  out << chrome_trace_json() << '\n';
  if (!out) throw Error(ErrorCode::invalid_argument, "cannot write trace file '" + path + "'");
}

ScopedSpan::ScopedSpan(Tracer* tracer, const char* name, const char* track, uint64_t step, int64_t count)
    : tracer_(tracer && tracer->recording() ? tracer : nullptr),
      name_(name),
      track_(track),
      step_(step),
      count_(count) {
  if (tracer_) start_s_ = now_s();
}

ScopedSpan::~ScopedSpan() {
  if (!tracer_) return;
  TraceSpan span;
  span.name = name_;
  span.track = track_;
  span.start_s = start_s_;
  span.end_s = now_s();
  span.step = step_;
  span.count = count_;
  span.thread = std::hash<std::thread::id>{}(std::this_thread::get_id());
  tracer_->add_span(std::move(span));
}

}  // namespace llmk
