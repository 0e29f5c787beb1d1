// The /v1/embeddings request and response shapes (ipc/embeddings.hpp): every
// form of OpenAI's `input`, the llmk pooling options, and a 400 naming the
// field for each bad input; the response in OpenAI's shape, float and base64.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/embeddings.hpp"
#include "ipc/errors.hpp"
#include "ipc/testing/fake_backend.hpp"

namespace {

using namespace llmk;
using namespace llmk::ipc;
using json = nlohmann::json;

EmbeddingsRequest parse(const json& body, const FakeBackend& backend) {
  return parse_embeddings_request(body.dump(), backend, Pooling::last);
}

// The reply the HTTP layer would send for the parse error of `body`.
ErrorReply refusal(const json& body, const FakeBackend& backend) {
  try {
    parse(body, backend);
  } catch (const std::exception& e) {
    return error_reply(e);
  }
  FAIL("accepted: " << body.dump());
  return {};
}

}  // namespace

TEST_CASE("embeddings requests accept every form of OpenAI's input", "[embeddings]") {
  FakeBackend backend;
  const EmbeddingsRequest one = parse({{"input", "hello"}}, backend);
  REQUIRE(one.inputs.size() == 1);
  CHECK(one.inputs[0].text == "hello");
  CHECK(one.params.pooling == Pooling::last);
  CHECK(one.params.normalize);
  CHECK(one.params.dimensions == 0);
  CHECK_FALSE(one.base64);

  const EmbeddingsRequest texts = parse({{"input", {"a", "b c"}}}, backend);
  REQUIRE(texts.inputs.size() == 2);
  CHECK(texts.inputs[1].text == "b c");

  const EmbeddingsRequest ids = parse({{"input", {1, 2, 3}}}, backend);
  REQUIRE(ids.inputs.size() == 1);
  CHECK(ids.inputs[0].token_ids == std::vector<int32_t>{1, 2, 3});

  const EmbeddingsRequest lists = parse({{"input", {{5}, {6, 7}, "x"}}}, backend);
  REQUIRE(lists.inputs.size() == 3);
  CHECK(lists.inputs[1].token_ids == std::vector<int32_t>{6, 7});
  CHECK(lists.inputs[2].text == "x");

  const EmbeddingsRequest options = parse(
      {{"input", "q"}, {"dimensions", 8}, {"encoding_format", "base64"}, {"pooling", "mean"}, {"normalize", false}},
      backend);
  CHECK(options.params.dimensions == 8);
  CHECK(options.base64);
  CHECK(options.params.pooling == Pooling::mean);
  CHECK_FALSE(options.params.normalize);
}

TEST_CASE("bad embeddings input is a 400 naming the field and the problem", "[embeddings]") {
  FakeBackend backend;
  const int32_t vocab = backend.model_info().vocab_size, context = backend.model_info().max_context;
  struct Case {
    json body;
    std::string param, says;
  };
  const std::vector<Case> cases = {
      {json::object(), "input", "required"},
      {{{"input", json::array()}}, "input", "empty list"},
      {{{"input", ""}}, "input", "empty string"},
      {{{"input", {"a", ""}}}, "input", "input[1] is an empty string"},
      {{{"input", {{1}, json::array()}}}, "input", "input[1] is an empty list"},
      {{{"input", {1, vocab}}}, "input", "outside the vocabulary"},
      {{{"input", {-1}}}, "input", "outside the vocabulary"},
      {{{"input", std::vector<int32_t>(static_cast<size_t>(context) + 1, 1)}}, "input", "more than the context"},
      {{{"input", 3.5}}, "input", "must be a string"},
      {{{"input", {json::object()}}}, "input", "input[0] must be a string or a list of token ids"},
      {{{"input", "a"}, {"dimensions", 0}}, "dimensions", "at least 1"},
      {{{"input", "a"}, {"dimensions", "8"}}, "dimensions", "integer"},
      {{{"input", "a"}, {"encoding_format", "int8"}}, "encoding_format", "float or base64"},
      {{{"input", "a"}, {"pooling", "cls"}}, "pooling", "mean or last"},
      {{{"input", "a"}, {"normalize", "yes"}}, "normalize", "boolean"},
  };
  for (const Case& c : cases) {
    INFO(c.body.dump());
    const ErrorReply r = refusal(c.body, backend);
    CHECK(r.http_status == 400);
    CHECK(r.param == c.param);
    CHECK_THAT(r.message, Catch::Contains(c.says));
  }
  const ErrorReply model = refusal({{"input", "a"}, {"model", "other"}}, backend);
  CHECK(model.http_status == 404);
  CHECK(refusal(json::array({1}), backend).http_status == 400);
}

TEST_CASE("embeddings responses have OpenAI's shape, floats or base64", "[embeddings]") {
  const std::vector<std::vector<float>> vectors = {{0.6f, 0.8f}, {1.0f, 0.0f}};
  const json floats = embeddings_response(vectors, false, "m", 7);
  CHECK(floats.at("object") == "list");
  CHECK(floats.at("model") == "m");
  CHECK(floats.at("usage") == json{{"prompt_tokens", 7}, {"total_tokens", 7}});
  REQUIRE(floats.at("data").size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(floats["data"][i].at("object") == "embedding");
    CHECK(floats["data"][i].at("index") == i);
    CHECK(floats["data"][i].at("embedding").get<std::vector<float>>() == vectors[i]);
  }
  const json encoded = embeddings_response(vectors, true, "m", 7);
  // 0.6f = 0x3F19999A, 0.8f = 0x3F4CCCCD, little-endian: 9A 99 19 3F CD CC 4C 3F.
  CHECK(encoded["data"][0].at("embedding") == "mpkZP83MTD8=");
  CHECK(encoded["data"][1].at("embedding") == encode_base64_f32(vectors[1]));
}
