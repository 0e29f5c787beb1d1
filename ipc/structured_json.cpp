#include "ipc/structured_json.hpp"

#include <string>
#include <vector>

#include "ipc/errors.hpp"

namespace llmk::ipc {
namespace {

using nlohmann::json;

// A schema given as an object (or true/false), or as a JSON string holding one.
std::string schema_text(const json& value, const std::string& field) {
  if (value.is_object() || value.is_boolean()) return value.dump();
  if (value.is_string()) {
    json parsed = json::parse(value.get<std::string>(), nullptr, false);
    if (parsed.is_discarded() || !(parsed.is_object() || parsed.is_boolean()))
      throw ParamError(field, "'" + field + "' must be a JSON Schema object (or a string holding one)");
    return parsed.dump();
  }
  throw ParamError(field, "'" + field + "' must be a JSON Schema object");
}

std::string nonempty_string(const json& value, const std::string& field) {
  if (!value.is_string() || value.get<std::string>().empty())
    throw ParamError(field, "'" + field + "' must be a non-empty string");
  return value.get<std::string>();
}

// A list of strings as an EBNF grammar whose only texts are those strings.
std::string choice_grammar(const json& value, const std::string& field) {
  if (!value.is_array() || value.empty()) throw ParamError(field, "'" + field + "' must be a non-empty list of strings");
  std::string grammar = "root ::=";
  for (size_t i = 0; i < value.size(); ++i) {
    if (!value[i].is_string() || value[i].get<std::string>().empty())
      throw ParamError(field, "'" + field + "' must hold non-empty strings");
    grammar += i == 0 ? " \"" : " | \"";
    for (char c : value[i].get<std::string>()) {
      switch (c) {
        case '"': grammar += "\\\""; break;
        case '\\': grammar += "\\\\"; break;
        case '\n': grammar += "\\n"; break;
        case '\r': grammar += "\\r"; break;
        case '\t': grammar += "\\t"; break;
        default: grammar += c;
      }
    }
    grammar += '"';
  }
  return grammar;
}

// One of structured_outputs' (or guided_*'s) keys: `key` is json, regex,
// grammar or choice; `field` names it for errors.
StructuredOutput from_vllm_key(const std::string& key, const json& value, const std::string& field) {
  StructuredOutput out;
  out.field = field;
  if (key == "json") {
    out.kind = GrammarKind::json_schema;
    out.text = schema_text(value, field);
  } else if (key == "regex") {
    out.kind = GrammarKind::regex;
    out.text = nonempty_string(value, field);
  } else if (key == "grammar") {
    out.kind = GrammarKind::ebnf;
    out.text = nonempty_string(value, field);
  } else {  // choice
    out.kind = GrammarKind::ebnf;
    out.text = choice_grammar(value, field);
  }
  return out;
}

std::shared_ptr<const StructuredOutput> from_response_format(const json& f) {
  if (!f.is_object()) throw ParamError("response_format", "'response_format' must be an object with a 'type'");
  const json type = f.value("type", json());
  if (type == "text") return nullptr;
  StructuredOutput out;
  out.field = "response_format";
  if (type == "json_object") {
    out.kind = GrammarKind::json_object;
  } else if (type == "json_schema") {
    auto js = f.find("json_schema");
    if (js == f.end() || !js->is_object())
      throw ParamError("response_format", "response_format 'json_schema' needs a 'json_schema' object");
    auto schema = js->find("schema");
    if (schema == js->end() || schema->is_null())
      throw ParamError("response_format", "response_format.json_schema needs a 'schema'");
    if (auto strict = js->find("strict"); strict != js->end() && !strict->is_null() && !strict->is_boolean())
      throw ParamError("response_format", "response_format.json_schema.strict must be a boolean");
    out.kind = GrammarKind::json_schema;
    out.field = "response_format.json_schema.schema";
    out.text = schema_text(*schema, out.field);
  } else {
    throw ParamError("response_format", "response_format type must be 'text', 'json_object' or 'json_schema', got " +
                                            type.dump());
  }
  return std::make_shared<const StructuredOutput>(std::move(out));
}

}  // namespace

std::shared_ptr<const StructuredOutput> parse_structured_output(const json& body) {
  std::shared_ptr<const StructuredOutput> found;
  std::string found_field;
  auto take = [&](std::shared_ptr<const StructuredOutput> spec, const std::string& field) {
    if (!spec) return;
    if (found)
      throw ParamError(field, "'" + field + "' and '" + found_field + "' both ask for structured output; give one");
    found = std::move(spec);
    found_field = field;
  };
  auto present = [&](const char* field) { return body.contains(field) && !body[field].is_null(); };
  if (present("response_format")) take(from_response_format(body["response_format"]), "response_format");
  if (present("structured_outputs")) {
    const json& so = body["structured_outputs"];
    if (!so.is_object()) throw ParamError("structured_outputs", "'structured_outputs' must be an object");
    std::vector<std::string> keys;
    for (const auto& [key, value] : so.items())
      if (!value.is_null()) keys.push_back(key);
    for (const auto& key : keys)
      if (key != "json" && key != "regex" && key != "grammar" && key != "choice")
        throw ParamError("structured_outputs", "structured_outputs." + key +
                                                   " is not supported (json, regex, grammar or choice)",
                         ErrorCode::unsupported);
    if (keys.size() > 1)
      throw ParamError("structured_outputs", "structured_outputs must hold one of json, regex, grammar and choice");
    if (keys.size() == 1)
      take(std::make_shared<const StructuredOutput>(
               from_vllm_key(keys[0], so[keys[0]], "structured_outputs." + keys[0])),
           "structured_outputs");
  }
  for (const char* key : {"json", "regex", "grammar", "choice"}) {
    const std::string field = std::string("guided_") + key;
    if (present(field.c_str()))
      take(std::make_shared<const StructuredOutput>(from_vllm_key(key, body[field], field)), field);
  }
  return found;
}

}  // namespace llmk::ipc
