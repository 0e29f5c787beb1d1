// FakeBackend: an ipc::Backend that behaves like a continuously batching
// engine without a model. One step every `step_interval` gives each running
// sample one token; requests wait in a bounded queue while `max_running`
// sequences run; KV usage counts the tokens held. Its tokens are a pure
// function of the prompt (expected_tokens), so tests and benches can check
// every streamed token against an independent expectation.
//
// Fake tokenizer: one token per byte, id = byte + 3 (0 unk, 1 bos, 2 eos).
// Generated tokens are lowercase letters and spaces. A chat is rendered as
// text by the named built-in template (chat_text) and tokenized with BOS.
// Requests are refused as the engine refuses them: the same sampling
// checks, and with strict_context a prompt plus max_tokens beyond
// max_context. A finished request leaves its prompt's full blocks of
// fake_block_size tokens in a fake prefix cache (each distinct prefix once);
// flush_cache drops them all and returns how many.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <set>
#include <thread>
#include <vector>

#include "ipc/backend.hpp"

namespace llmk::ipc {

struct FakeBackendOptions {
  std::chrono::microseconds step_interval{1000};  // one decode step
  std::chrono::microseconds prefill_delay{0};     // extra wait before a request's first token
  int32_t max_context = 512;
  uint32_t max_running = 64;
  uint32_t max_queue = 1024;
  uint64_t kv_capacity_tokens = 65536;
  std::string model_name = "fake-model";
  std::string chat_template = "chatml";  // chatml | llama-2 | "" (none)
  ToolParser tool_parser = ToolParser::none;  // ModelInfo::tool_parser
};

class FakeBackend : public Backend {
 public:
  explicit FakeBackend(FakeBackendOptions options = {});
  ~FakeBackend() override;  // cancels what is live, joins the step thread

  void submit(Request request, EventCallback on_event) override;
  bool cancel(const std::string& request_id) override;
  EngineStats stats() const override;
  ModelInfo model_info() const override;
  uint32_t flush_cache() override;

  static constexpr int32_t vocab_size = 259;
  static constexpr size_t fake_block_size = 16;
  static std::vector<int32_t> tokenize(std::string_view text, bool add_bos);
  // The text a chat is rendered to (the built-in template of
  // options.chat_template). Throws Error like ChatTemplate::render, and
  // Error(unsupported) when chat_template is "".
  std::string chat_text(const ChatInput& chat) const;
  std::string token_text(int32_t id) const override { return fake_token_text(id); }
  static std::string fake_token_text(int32_t id);  // "" for specials
  // The first `num_tokens` tokens sample `index` generates for `prompt`;
  // seed matters only when temperature > 0.
  static std::vector<int32_t> expected_tokens(const std::vector<int32_t>& prompt_ids, int32_t index,
                                              int32_t num_tokens, float temperature = 0.0f,
                                              uint64_t seed = 0);
  static std::string expected_text(const std::vector<int32_t>& prompt_ids, int32_t num_tokens);

 private:
  struct Sample;
  struct Live;
  void run();
  bool step(std::vector<std::pair<std::shared_ptr<Live>, RequestEvent>>& out);
  void finish_sample(Live& live, Sample& s, FinishReason reason, RequestEvent& ev);
  uint64_t kv_used_locked() const;

  const FakeBackendOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::map<std::string, std::shared_ptr<Live>> live_;  // by request id
  std::deque<std::shared_ptr<Live>> waiting_;
  std::vector<std::shared_ptr<Live>> running_;
  std::vector<std::pair<std::shared_ptr<Live>, RequestEvent>> refusals_;  // emitted by the step thread
  EngineStats counters_;
  std::set<std::vector<int32_t>> cached_prefixes_;  // finished prompts' full-block prefixes
  std::thread thread_;
};

}  // namespace llmk::ipc
