#include "ipc/testing/fake_backend.hpp"

#include <algorithm>

#include "core/chat_template.hpp"
#include "core/error.hpp"
#include "core/sampler.hpp"
#include "core/stop_matcher.hpp"

namespace llmk::ipc {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

uint64_t fnv1a(const std::vector<int32_t>& ids) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t id : ids) {
    h ^= static_cast<uint32_t>(id);
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

struct FakeBackend::Sample {
  explicit Sample(const std::vector<std::string>& stop) : stops(stop) {}
  std::vector<int32_t> tokens;  // generated
  StopStringMatcher stops;      // what of the decoded text may be shown
  bool finished = false;
};

struct FakeBackend::Live {
  Request request;
  EventCallback on_event;
  std::vector<int32_t> prompt_ids;
  std::vector<Sample> samples;
  Clock::time_point arrival;
  Clock::time_point scheduled;
  Clock::time_point first_token_due;
  std::vector<double> token_times_s;
  double first_token_s = -1;
  bool cancel_requested = false;
  int32_t num_unfinished = 0;
};

FakeBackend::FakeBackend(FakeBackendOptions options) : options_(std::move(options)) {
  thread_ = std::thread([this] { run(); });
}

FakeBackend::~FakeBackend() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::vector<int32_t> FakeBackend::tokenize(std::string_view text, bool add_bos) {
  std::vector<int32_t> ids;
  if (add_bos) ids.push_back(1);
  for (unsigned char c : text) ids.push_back(static_cast<int32_t>(c) + 3);
  return ids;
}

std::string FakeBackend::fake_token_text(int32_t id) {
  if (id < 3 || id >= vocab_size) return "";
  return std::string(1, static_cast<char>(id - 3));
}

std::vector<int32_t> FakeBackend::expected_tokens(const std::vector<int32_t>& prompt_ids, int32_t index,
                                                  int32_t num_tokens, float temperature, uint64_t seed) {
  uint64_t h = fnv1a(prompt_ids);
  if (temperature > 0) h ^= seed * 0x9e3779b97f4a7c15ull;
  std::vector<int32_t> out;
  for (int32_t k = 0; k < num_tokens; ++k) {
    const uint64_t v = (h + 7ull * static_cast<uint64_t>(k) + 13ull * static_cast<uint64_t>(index)) % 27;
    const char c = v == 26 ? ' ' : static_cast<char>('a' + v);
    out.push_back(static_cast<int32_t>(static_cast<unsigned char>(c)) + 3);
  }
  return out;
}

std::string FakeBackend::expected_text(const std::vector<int32_t>& prompt_ids, int32_t num_tokens) {
  std::string text;
  for (int32_t id : expected_tokens(prompt_ids, 0, num_tokens)) text += fake_token_text(id);
  return text;
}

std::string FakeBackend::chat_text(const ChatInput& chat) const {
  if (options_.chat_template.empty()) {
    throw Error(ErrorCode::unsupported,
                "the model has no chat template: set model.chat_template (llama-2 or chatml)");
  }
  return ChatTemplate::by_name(options_.chat_template).render(chat.messages, chat.options);
}

void FakeBackend::submit(Request request, EventCallback on_event) {
  auto live = std::make_shared<Live>();
  live->arrival = Clock::now();
  live->on_event = std::move(on_event);
  live->request = std::move(request);
  const Request& r = live->request;
  const auto refuse = [&](ErrorCode code, std::string message) {
    RequestEvent ev;
    ev.request_id = r.id;
    ev.finished = ev.request_done = true;
    ev.finish_reason = FinishReason::error;
    ev.error_code = code;
    ev.error = std::move(message);
    std::lock_guard lock(mutex_);
    refusals_.emplace_back(live, std::move(ev));
    wake_.notify_all();
  };
  try {
    if (r.chat) {
      live->prompt_ids = tokenize(chat_text(*r.chat), true);
    } else {
      live->prompt_ids = r.prompt_token_ids.empty() ? tokenize(r.prompt, r.add_bos) : r.prompt_token_ids;
    }
    validate_sampling_params(r.sampling);
  } catch (const Error& e) {
    return refuse(e.code(), e.what());
  }
  if (r.sampling.structured)  // its text follows no grammar: never pass it off as following one
    return refuse(ErrorCode::unsupported, "structured outputs are not served by this backend");
  const auto num_prompt = static_cast<int32_t>(live->prompt_ids.size());
  if (num_prompt == 0) return refuse(ErrorCode::invalid_argument, "the prompt is empty");
  for (int32_t id : live->prompt_ids) {
    if (id < 0 || id >= vocab_size) {
      return refuse(ErrorCode::invalid_argument,
                    "prompt token id " + std::to_string(id) + " is outside the vocabulary [0, 259)");
    }
  }
  if (num_prompt >= options_.max_context || (r.strict_context && num_prompt + r.sampling.max_tokens > options_.max_context)) {
    return refuse(ErrorCode::invalid_argument,
                  "this model's context holds " + std::to_string(options_.max_context) + " tokens, but " +
                      std::to_string(num_prompt + r.sampling.max_tokens) + " were requested (" +
                      std::to_string(num_prompt) + " in the prompt, " + std::to_string(r.sampling.max_tokens) +
                      " for the completion)");
  }
  std::lock_guard lock(mutex_);
  if (stopping_) {
    RequestEvent ev;
    ev.request_id = r.id;
    ev.finished = ev.request_done = true;
    ev.finish_reason = FinishReason::error;
    ev.error_code = ErrorCode::overloaded;
    ev.error = "the backend is shutting down";
    refusals_.emplace_back(live, std::move(ev));
    return;
  }
  if (live_.count(r.id)) {
    RequestEvent ev;
    ev.request_id = r.id;
    ev.finished = ev.request_done = true;
    ev.finish_reason = FinishReason::error;
    ev.error_code = ErrorCode::invalid_argument;
    ev.error = "request id '" + r.id + "' is already live";
    refusals_.emplace_back(live, std::move(ev));
  } else if (waiting_.size() >= options_.max_queue) {
    RequestEvent ev;
    ev.request_id = r.id;
    ev.finished = ev.request_done = true;
    ev.finish_reason = FinishReason::error;
    ev.error_code = ErrorCode::overloaded;
    ev.error = "the waiting queue is full (scheduler.max_queue = " + std::to_string(options_.max_queue) + ")";
    refusals_.emplace_back(live, std::move(ev));
  } else {
    live->samples.assign(static_cast<size_t>(std::max(1, r.sampling.n)), Sample(r.sampling.stop));
    live->num_unfinished = static_cast<int32_t>(live->samples.size());
    live_[r.id] = live;
    waiting_.push_back(live);
    ++counters_.num_requests_total;
    counters_.num_prompt_tokens += static_cast<uint64_t>(num_prompt);
  }
  wake_.notify_all();
}

bool FakeBackend::cancel(const std::string& request_id) {
  std::lock_guard lock(mutex_);
  auto it = live_.find(request_id);
  if (it == live_.end() || it->second->cancel_requested) return false;
  it->second->cancel_requested = true;
  // A waiting request holds no KV: it leaves the queue now; a running one
  // is finished (and its KV freed) by the next step.
  auto w = std::find(waiting_.begin(), waiting_.end(), it->second);
  if (w != waiting_.end()) {
    waiting_.erase(w);
    running_.push_back(it->second);
  }
  wake_.notify_all();
  return true;
}

uint64_t FakeBackend::kv_used_locked() const {
  uint64_t used = 0;
  for (const auto& live : running_) {
    used += live->prompt_ids.size();
    for (const auto& s : live->samples) used += s.tokens.size();
  }
  return used;
}

EngineStats FakeBackend::stats() const {
  std::lock_guard lock(mutex_);
  EngineStats st = counters_;
  st.num_running = running_.size();
  st.num_waiting = waiting_.size();
  st.kv.total_slots = options_.kv_capacity_tokens;
  st.kv.used_slots = st.kv.reserved_slots = kv_used_locked();
  st.kv.num_seqs = running_.size();
  return st;
}

uint32_t FakeBackend::flush_cache() {
  std::lock_guard lock(mutex_);
  const auto num_dropped = static_cast<uint32_t>(cached_prefixes_.size());
  cached_prefixes_.clear();
  return num_dropped;
}

ModelInfo FakeBackend::model_info() const {
  return {options_.model_name, options_.max_context, vocab_size, options_.chat_template, options_.max_queue, "",
          options_.tool_parser};
}

void FakeBackend::run() {
  std::vector<std::pair<std::shared_ptr<Live>, RequestEvent>> out;
  auto next_step = Clock::now();
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !running_.empty() || !waiting_.empty() || !refusals_.empty(); });
      if (stopping_) {
        for (auto& live : waiting_) running_.push_back(live);
        waiting_.clear();
        for (auto& live : running_) live->cancel_requested = true;
      }
      out = std::move(refusals_);
      refusals_.clear();
      if (!step(out) && stopping_ && out.empty()) return;
    }
    for (auto& [live, ev] : out) live->on_event(ev);
    out.clear();
    bool idle;
    {
      std::lock_guard lock(mutex_);
      idle = running_.empty() && waiting_.empty();
      if (stopping_ && idle && refusals_.empty()) return;
    }
    next_step += options_.step_interval;
    const auto now = Clock::now();
    if (idle || next_step < now) next_step = now;
    std::this_thread::sleep_until(next_step);
  }
}

void FakeBackend::finish_sample(Live& live, Sample& s, FinishReason reason, RequestEvent& ev) {
  s.finished = true;
  --live.num_unfinished;
  ev.finished = true;
  ev.finish_reason = reason;
  ev.usage.prompt_tokens = static_cast<int32_t>(live.prompt_ids.size());
  ev.usage.completion_tokens = static_cast<int32_t>(s.tokens.size());
  const auto now = Clock::now();
  ev.timings.queue_s = seconds_between(live.arrival, live.scheduled);
  ev.timings.time_to_first_token_s = live.first_token_s < 0 ? 0 : live.first_token_s;
  ev.timings.e2e_s = seconds_between(live.arrival, now);
  ev.timings.token_times_s = live.token_times_s;
  ev.request_done = live.num_unfinished == 0;
  ++counters_.num_requests_finished;
}

// One engine step under the lock: admits waiting requests, gives each
// running sample a token, finishes samples and frees finished requests.
bool FakeBackend::step(std::vector<std::pair<std::shared_ptr<Live>, RequestEvent>>& out) {
  const auto now = Clock::now();
  while (!waiting_.empty() && running_.size() < options_.max_running &&
         kv_used_locked() + waiting_.front()->prompt_ids.size() <= options_.kv_capacity_tokens) {
    auto live = waiting_.front();
    waiting_.pop_front();
    live->scheduled = now;
    live->first_token_due = now + options_.prefill_delay;
    running_.push_back(live);
    counters_.num_prefill_tokens += live->prompt_ids.size();
  }
  if (running_.empty()) return false;
  ++counters_.num_steps;
  const double batch = static_cast<double>(running_.size());
  counters_.mean_batch_seqs += (batch - counters_.mean_batch_seqs) / static_cast<double>(counters_.num_steps);
  counters_.peak_running = std::max<uint64_t>(counters_.peak_running, running_.size());
  for (auto& live : running_) {
    const Request& r = live->request;
    for (size_t i = 0; i < live->samples.size(); ++i) {
      Sample& s = live->samples[i];
      if (s.finished) continue;
      RequestEvent ev;
      ev.request_id = r.id;
      ev.index = static_cast<int32_t>(i);
      if (live->cancel_requested) {
        finish_sample(*live, s, FinishReason::cancelled, ev);
        out.emplace_back(live, std::move(ev));
        continue;
      }
      if (now < live->first_token_due) continue;
      const auto k = static_cast<int32_t>(s.tokens.size());
      const int32_t id = expected_tokens(live->prompt_ids, ev.index, k + 1, r.sampling.temperature,
                                         r.sampling.seed.value_or(0))[static_cast<size_t>(k)];
      s.tokens.push_back(id);
      ++counters_.num_generated_tokens;
      if (i == 0) {
        const double t = seconds_between(live->arrival, now);
        if (live->first_token_s < 0) live->first_token_s = t;
        live->token_times_s.push_back(t);
      }
      ev.token_ids = {id};
      if (r.sampling.logprobs >= 0) {
        TokenLogprob lp{id, -0.25f - 0.01f * static_cast<float>(k), {}};
        lp.top.emplace_back(id, lp.logprob);
        for (int32_t j = 1; j <= r.sampling.logprobs; ++j) {
          lp.top.emplace_back((id + j) % vocab_size, lp.logprob - static_cast<float>(j));
        }
        ev.logprobs.push_back(std::move(lp));
      }
      // Stop conditions: stop strings (the match is not part of the text),
      // stop ids, then max_tokens and the context.
      StopStringMatcher::Result shown = s.stops.push(fake_token_text(id));
      ev.text_delta = std::move(shown.text);
      const bool stop_id = std::find(r.sampling.stop_token_ids.begin(), r.sampling.stop_token_ids.end(), id) !=
                           r.sampling.stop_token_ids.end();
      const bool full = k + 1 >= r.sampling.max_tokens ||
                        static_cast<int64_t>(live->prompt_ids.size()) + k + 1 >= options_.max_context;
      if (shown.stopped) {
        finish_sample(*live, s, FinishReason::stop, ev);
      } else if (stop_id || full) {
        ev.text_delta += s.stops.flush();
        finish_sample(*live, s, stop_id ? FinishReason::stop : FinishReason::length, ev);
      }
      out.emplace_back(live, std::move(ev));
    }
  }
  std::erase_if(running_, [&](const std::shared_ptr<Live>& live) {
    if (live->num_unfinished > 0) return false;
    const auto& prompt = live->prompt_ids;
    for (size_t end = fake_block_size; end <= prompt.size(); end += fake_block_size)
      cached_prefixes_.emplace(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(end));
    live_.erase(live->request.id);
    return true;
  });
  return true;
}

}  // namespace llmk::ipc
