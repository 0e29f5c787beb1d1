// Beam search fields as the front ends read them (docs/beam_search.md):
// vLLM's use_beam_search with the width in best_of or n, llmk's beam_width,
// length_penalty and early_stopping, on /v1/completions, /v1/chat/completions
// and ZeroMQ params; and each request beam search cannot serve refused
// naming the field as the request spelled it.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>

#include "ipc/backend.hpp"
#include "ipc/openai.hpp"
#include "ipc/zmq_protocol.hpp"

using namespace llmk;
using namespace llmk::ipc;
using nlohmann::json;

namespace {

class ModelOnly final : public Backend {
 public:
  void submit(Request, EventCallback) override {}
  bool cancel(const std::string&) override { return false; }
  EngineStats stats() const override { return {}; }
  uint32_t flush_cache() override { return 0; }
  ModelInfo model_info() const override { return {std::string(kName), 512, 512, std::string(kTemplate), 0, {}}; }
  static constexpr const char* kName = "stories";
  static constexpr const char* kTemplate = "chatml";
  std::string token_text(int32_t) const override { return ""; }
};

OpenAiRequest completion(json body) {
  body["prompt"] = "Once";
  return parse_openai_request(OpenAiEndpoint::completions, body.dump(), ModelOnly());
}

// The field an HTTP body is refused for ("" when it is accepted).
std::string refused_field(OpenAiEndpoint endpoint, json body) {
  if (endpoint == OpenAiEndpoint::completions) body["prompt"] = "Once";
  else body["messages"] = json::array({{{"role", "user"}, {"content", "x"}}});
  try {
    parse_openai_request(endpoint, body.dump(), ModelOnly());
  } catch (const FieldError& e) {
    return e.field();
  }
  return "";
}

}  // namespace

TEST_CASE("vLLM's beam search fields set the width, length penalty and early stopping", "[ipc][beam]") {
  // Older vLLM: best_of is the width, n the hypotheses returned.
  OpenAiRequest r = completion({{"use_beam_search", true}, {"best_of", 4}, {"n", 2}, {"length_penalty", 0.5},
                                {"early_stopping", "never"}, {"temperature", 0}});
  CHECK(r.request.sampling.beam_width == 4);
  CHECK(r.request.sampling.n == 2);
  CHECK(r.request.sampling.length_penalty == 0.5f);
  CHECK(r.request.sampling.early_stopping == EarlyStopping::never);
  // Newer vLLM: n is the width, every beam comes back; temperature left at its default.
  r = completion({{"use_beam_search", true}, {"n", 3}, {"early_stopping", true}});
  CHECK(r.request.sampling.beam_width == 3);
  CHECK(r.request.sampling.n == 3);
  CHECK(r.request.sampling.early_stopping == EarlyStopping::immediate);
  // llmk's own field; early_stopping false is the heuristic.
  r = completion({{"beam_width", 2}, {"early_stopping", false}});
  CHECK(r.request.sampling.beam_width == 2);
  CHECK(r.request.sampling.n == 1);
  CHECK(r.request.sampling.early_stopping == EarlyStopping::heuristic);
  CHECK(completion({{"use_beam_search", false}, {"n", 2}}).request.sampling.beam_width == 0);

  const auto chat = parse_openai_request(OpenAiEndpoint::chat,
                                         json{{"messages", json::array({{{"role", "user"}, {"content", "x"}}})},
                                              {"use_beam_search", true},
                                              {"best_of", 3},
                                              {"n", 2}}
                                             .dump(),
                                         ModelOnly());
  CHECK(chat.request.sampling.beam_width == 3);
  CHECK(chat.request.sampling.n == 2);

  const ClientMessage m = parse_client_message(
      json{{"v", 1}, {"type", "submit"}, {"id", "z"}, {"prompt_token_ids", {1, 2}},
           {"params", {{"beam_width", 4}, {"n", 2}, {"length_penalty", 2.0}, {"early_stopping", "never"}}}}
          .dump(),
      512, 512);
  CHECK(m.request.sampling.beam_width == 4);
  CHECK(m.request.sampling.n == 2);
  CHECK(m.request.sampling.length_penalty == 2.0f);
  CHECK(m.request.sampling.early_stopping == EarlyStopping::never);
}

TEST_CASE("requests beam search cannot serve are refused naming the field", "[ipc][beam]") {
  using E = OpenAiEndpoint;
  const json beams = {{"use_beam_search", true}, {"best_of", 2}};
  auto with = [&beams](json extra) {
    json b = beams;
    b.update(extra);
    return b;
  };
  CHECK(refused_field(E::completions, with({{"temperature", 0.7}})) == "temperature");
  CHECK(refused_field(E::completions, with({{"stream", true}})) == "stream");
  CHECK(refused_field(E::chat, with({{"stream", true}})) == "stream");
  CHECK(refused_field(E::completions, with({{"n", 3}})) == "n");
  CHECK(refused_field(E::completions, with({{"top_p", 0.5}})) == "top_p");
  CHECK(refused_field(E::completions, with({{"presence_penalty", 0.5}})) == "presence_penalty");
  CHECK(refused_field(E::completions, with({{"logprobs", 2}})) == "logprobs");
  CHECK(refused_field(E::chat, with({{"logprobs", true}, {"top_logprobs", 2}})) == "top_logprobs");
  CHECK(refused_field(E::completions, with({{"stop", "."}})) == "stop");
  CHECK(refused_field(E::completions, with({{"early_stopping", "sometimes"}})) == "early_stopping");
  CHECK(refused_field(E::completions, with({{"length_penalty", 100}})) == "length_penalty");
  CHECK(refused_field(E::completions, with({{"best_of", 11}})) == "best_of");
  CHECK(refused_field(E::completions, {{"use_beam_search", true}, {"n", 12}}) == "n");
  CHECK(refused_field(E::completions, {{"beam_width", 11}}) == "beam_width");
  CHECK(refused_field(E::completions, {{"beam_width", 2}, {"best_of", 3}}) == "best_of");
  CHECK(refused_field(E::completions, {{"length_penalty", 2.0}}) == "length_penalty");
  CHECK(refused_field(E::completions, {{"early_stopping", true}}) == "early_stopping");
  CHECK(refused_field(E::completions, {{"best_of", 2}}) == "best_of");  // best_of without beam search
  CHECK(refused_field(E::completions, with(json::object())) == "");
  CHECK_THROWS_AS(parse_client_message(json{{"v", 1}, {"type", "submit"}, {"id", "z"}, {"prompt_token_ids", {1}},
                                            {"params", {{"beam_width", 2}, {"temperature", 0.5}}}}
                                           .dump(),
                                       512, 512),
                  FieldError);
}
