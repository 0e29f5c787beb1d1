#include "ipc/embeddings.hpp"

#include <limits>
#include <optional>

#include "ipc/errors.hpp"
#include "ipc/request_json.hpp"

namespace llmk::ipc {

using json = nlohmann::json;

namespace {

// One list of token ids; `where` names it in errors ("input[2]").
std::vector<int32_t> parse_ids(const json& ids, const std::string& where, const ModelInfo& model) {
  if (ids.empty()) throw ParamError("input", where + " is an empty list of token ids");
  if (model.max_context > 0 && ids.size() > static_cast<size_t>(model.max_context))
    throw ParamError("input", where + " has " + std::to_string(ids.size()) + " tokens, more than the context of " +
                                  std::to_string(model.max_context));
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (const json& id : ids) {
    if (!id.is_number_integer()) throw ParamError("input", where + " must hold only integer token ids");
    const int64_t t = id.get<int64_t>();
    if (t < 0 || t >= model.vocab_size)
      throw ParamError("input", "token id " + std::to_string(t) + " in " + where + " is outside the vocabulary [0, " +
                                    std::to_string(model.vocab_size) + ")");
    out.push_back(static_cast<int32_t>(t));
  }
  return out;
}

EmbeddingInput parse_text(const json& text, const std::string& where) {
  EmbeddingInput in;
  in.text = text.get<std::string>();
  if (in.text.empty()) throw ParamError("input", where + " is an empty string");
  return in;
}

std::vector<EmbeddingInput> parse_inputs(const json& input, const ModelInfo& model) {
  std::vector<EmbeddingInput> out;
  if (input.is_string()) {
    out.push_back(parse_text(input, "'input'"));
    return out;
  }
  if (!input.is_array())
    throw ParamError("input", "'input' must be a string, a list of strings, a list of token ids or a list of such lists");
  if (input.empty()) throw ParamError("input", "'input' is an empty list");
  if (input[0].is_number()) {
    out.push_back({{}, parse_ids(input, "'input'", model)});
    return out;
  }
  if (input.size() > kMaxEmbeddingInputs)
    throw ParamError("input", "'input' has " + std::to_string(input.size()) + " items, more than " +
                                  std::to_string(kMaxEmbeddingInputs));
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string where = "input[" + std::to_string(i) + "]";
    if (input[i].is_string()) out.push_back(parse_text(input[i], where));
    else if (input[i].is_array()) out.push_back({{}, parse_ids(input[i], where, model)});
    else throw ParamError("input", where + " must be a string or a list of token ids");
  }
  return out;
}

}  // namespace

EmbeddingsRequest parse_embeddings_request(const std::string& body_text, const Backend& backend,
                                           Pooling default_pooling) {
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::exception& e) {
    throw ProtocolError(ProtocolFailure::malformed, std::string("malformed JSON body: ") + e.what());
  }
  if (!body.is_object()) throw ProtocolError(ProtocolFailure::malformed, "the body must be a JSON object");
  return parse_embeddings_fields(body, backend.model_info(), default_pooling);
}

EmbeddingsRequest parse_embeddings_fields(const json& body, const ModelInfo& model, Pooling default_pooling) {
  const std::string model_name = get_string(body, "model", model.name);
  if (model_name != model.name)
    throw ParamError("model", "the model '" + model_name + "' does not exist; this server serves '" + model.name + "'",
                     ErrorCode::not_found);
  EmbeddingsRequest out;
  if (!body.contains("input")) throw ParamError("input", "'input' is required");
  out.inputs = parse_inputs(body["input"], model);

  const std::string format = get_string(body, "encoding_format", "float");
  if (format != "float" && format != "base64")
    throw ParamError("encoding_format", "'encoding_format' must be float or base64, got '" + format + "'");
  out.base64 = format == "base64";

  if (auto d = body.find("dimensions"); d != body.end() && !d->is_null()) {
    if (!d->is_number_integer()) throw ParamError("dimensions", "'dimensions' must be an integer");
    const int64_t dims = d->get<int64_t>();
    if (dims < 1 || dims > std::numeric_limits<int32_t>::max())
      throw ParamError("dimensions", "'dimensions' must be at least 1, got " + std::to_string(dims));
    out.params.dimensions = static_cast<int32_t>(dims);
  }
  out.params.pooling = default_pooling;
  const std::string pooling = get_string(body, "pooling", "");
  if (!pooling.empty()) {
    const std::optional<Pooling> p = parse_pooling(pooling);
    if (!p) throw ParamError("pooling", "'pooling' must be mean or last, got '" + pooling + "'");
    out.params.pooling = *p;
  }
  out.params.normalize = get_bool(body, "normalize", true);
  return out;
}

json embeddings_response(const std::vector<std::vector<float>>& vectors, bool base64, const std::string& model,
                         int32_t prompt_tokens) {
  json data = json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    json item = {{"object", "embedding"}, {"index", i}};
    if (base64) item["embedding"] = encode_base64_f32(vectors[i]);
    else item["embedding"] = vectors[i];
    data.push_back(std::move(item));
  }
  return {{"object", "list"},
          {"data", std::move(data)},
          {"model", model},
          {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

}  // namespace llmk::ipc
