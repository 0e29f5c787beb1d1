// Pipeline tracing: per-step spans of each actor (tokenize, schedule,
// execute, sample, detokenize) written as Chrome trace JSON (load it in
// chrome://tracing or https://ui.perfetto.dev), and an observer hook that
// sees every message an actor handles, in the order the actors handle them.
//
// Spans go to one track per actor, so the overlap of detokenizing step t with
// executing step t+1 shows as two bars side by side.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace llmk {

// Seconds on the steady clock since the first call in this process.
double now_s();

// One message handled by one actor (for the observer).
struct PipelineEvent {
  uint64_t sequence = 0;   // global handling order
  std::string actor;       // "tokenizer", "scheduler", "executor", "sampler", "detokenizer", "client"
  std::string message;     // "submit", "enqueue", "open", "execute", "sample", "step_done", "tokens", "event", ...
  std::string request_id;  // when the message concerns one request
  uint64_t step = 0;       // when it concerns a step
};

struct TraceSpan {
  std::string name;   // tokenize | schedule | execute | sample | detokenize
  std::string track;  // the actor
  double start_s = 0;
  double end_s = 0;
  uint64_t step = 0;
  int64_t count = 0;  // requests, sequences or tokens handled
  uint64_t thread = 0;  // OS thread that ran it (hashed id)
};

class Tracer {
 public:
  using Observer = std::function<void(const PipelineEvent&)>;

  // record_spans: keep spans in memory (for write_chrome_trace / spans()).
  Tracer(bool record_spans, Observer observer);

  bool recording() const { return record_spans_; }
  void add_span(TraceSpan span);
  void observe(const std::string& actor, const std::string& message, const std::string& request_id = {},
               uint64_t step = 0);

  std::vector<TraceSpan> spans() const;
  // Chrome trace JSON ("traceEvents", complete events in microseconds).
  std::string chrome_trace_json() const;
  // Throws Error(invalid_argument) naming the file when it cannot be written.
  void write_chrome_trace(const std::string& path) const;

 private:
  bool record_spans_;
  Observer observer_;
  mutable std::mutex mutex_;
  std::vector<TraceSpan> spans_;
  uint64_t next_sequence_ = 0;
};

// Times a span from construction to destruction (no-op without a tracer or
// when the tracer does not record).
class ScopedSpan {
 public:
  ScopedSpan(Tracer* tracer, const char* name, const char* track, uint64_t step, int64_t count = 0);
  ~ScopedSpan();
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;
  void set_count(int64_t count) { count_ = count; }

 private:
  Tracer* tracer_;
  const char* name_;
  const char* track_;
  uint64_t step_;
  int64_t count_;
  double start_s_ = 0;
};

}  // namespace llmk
