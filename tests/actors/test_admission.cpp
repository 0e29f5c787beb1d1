// One admission path: the tokenizer actor only turns text and chats into
// ids, the scheduler alone decides lengths, sampling values and the queue,
// and every refusal reaches the request as its one error event.
#include <catch2/catch.hpp>

#include "core/chat_template.hpp"
#include "core/tokenizer.hpp"
#include "engine_fixture.hpp"

using namespace llmk;
using namespace llmk::test;

namespace {

Request greedy(const std::string& id, int32_t max_tokens) {
  Request r;
  r.id = id;
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

Request chat_request(const std::string& id, std::vector<ChatMessage> messages, int32_t max_tokens) {
  Request r = greedy(id, max_tokens);
  r.chat = std::make_shared<const ChatInput>(ChatInput{std::move(messages), {}});
  return r;
}

}  // namespace

TEST_CASE("with strict_context the scheduler refuses a prompt plus max_tokens beyond the context; without it the "
          "completion stops at the context",
          "[engine][admission]") {
  EngineConfig cfg = stories_config();
  cfg.kv_cache.max_seq_len = 64;
  Engine engine(cfg);
  const std::vector<int32_t> prompt = engine.tokenizer().encode("Once upon a time", true);
  const auto num_prompt = static_cast<int32_t>(prompt.size());

  Request strict = greedy("strict", 64 - num_prompt + 1);
  strict.prompt = "Once upon a time";
  strict.strict_context = true;
  const RequestResult refused = run_one(engine, strict);
  CHECK(refused.sample().finish_reason == FinishReason::error);
  CHECK(refused.sample().error_code == ErrorCode::invalid_argument);
  CHECK_THAT(refused.sample().error, Catch::Contains("context holds 64 tokens, but 65 were requested"));
  CHECK(refused.sample().token_ids.empty());

  Request fits = strict;
  fits.id = "fits";
  fits.sampling.max_tokens = 64 - num_prompt;
  const RequestResult served = run_one(engine, fits);
  CHECK(served.sample().finish_reason == FinishReason::length);
  CHECK(served.sample().usage.prompt_tokens == num_prompt);
  CHECK(served.sample().usage.completion_tokens == 64 - num_prompt);

  Request lenient = strict;
  lenient.id = "lenient";
  lenient.strict_context = false;
  lenient.sampling.max_tokens = 1000;
  const RequestResult stopped = run_one(engine, lenient);
  CHECK(stopped.sample().finish_reason == FinishReason::length);
  CHECK(stopped.sample().usage.prompt_tokens + stopped.sample().usage.completion_tokens == 64);
  // The same greedy continuation, cut at the same place.
  CHECK(stopped.sample().token_ids == served.sample().token_ids);
}

TEST_CASE("a chat request is rendered and tokenized inside the engine, giving what its template's ids give",
          "[engine][admission][chat]") {
  EngineConfig cfg = stories_config();
  cfg.model.chat_template = "chatml";
  Engine engine(cfg);
  REQUIRE(engine.chat_template() != nullptr);
  const std::vector<ChatMessage> messages{{"system", "Tell short stories."}, {"user", "A cat and a dog"}};

  // The independent route: the built-in template's encoding, submitted as ids.
  Request by_ids = greedy("ids", 12);
  by_ids.prompt_token_ids = ChatTemplate::by_name("chatml").encode(messages, engine.tokenizer(),
                                                                   engine.model_config().add_bos_token);
  const RequestResult expected = run_one(engine, by_ids);
  REQUIRE(expected.sample().token_ids.size() == 12);

  const RequestResult got = run_one(engine, chat_request("chat", messages, 12));
  CHECK(got.sample().finish_reason == FinishReason::length);
  CHECK(got.sample().usage.prompt_tokens == static_cast<int32_t>(by_ids.prompt_token_ids.size()));
  CHECK(got.sample().token_ids == expected.sample().token_ids);
  CHECK(got.sample().text == expected.sample().text);

  // A chat the template refuses is that request's error, and only its.
  const RequestResult empty = run_one(engine, chat_request("empty", {}, 4));
  CHECK(empty.sample().finish_reason == FinishReason::error);
  CHECK(empty.sample().error_code == ErrorCode::invalid_argument);
  CHECK(run_one(engine, chat_request("after", messages, 12)).sample().token_ids == expected.sample().token_ids);
}

TEST_CASE("a chat request to a model without a chat template is refused naming the setting, and completions go on",
          "[engine][admission][chat]") {
  Engine engine(stories_config());  // stories260K's tokenizer_config.json has no chat_template
  CHECK(engine.chat_template() == nullptr);
  const RequestResult refused = run_one(engine, chat_request("chat", {{"user", "hello"}}, 4));
  CHECK(refused.sample().finish_reason == FinishReason::error);
  CHECK(refused.sample().error_code == ErrorCode::unsupported);
  CHECK_THAT(refused.sample().error, Catch::Contains("model.chat_template"));
  Request text = greedy("text", 4);
  text.prompt = "Once upon a time";
  CHECK(run_one(engine, text).sample().finish_reason == FinishReason::length);
}

TEST_CASE("a configured chat template that cannot be used stops the engine from starting, naming it",
          "[engine][admission][chat]") {
  EngineConfig cfg = stories_config();
  cfg.model.chat_template = LLMK_SHARED_DIR "/models/stories260K/no-such-template.jinja";
  try {
    Engine engine(cfg);
    FAIL("the engine started with a missing chat template file");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("no-such-template.jinja"));
  }
}
