#include "ipc/tool_choice.hpp"

#include <set>

#include "core/jinja/value.hpp"
#include "ipc/errors.hpp"

namespace llmk::ipc {
namespace {

using ojson = nlohmann::ordered_json;

// A function's parameters: a JSON Schema object, as OpenAI takes it.
void check_parameters(const ojson& parameters, const std::string& field) {
  if (parameters.is_string()) {
    const auto parsed = ojson::parse(parameters.get<std::string>(), nullptr, false);
    throw ParamError(field, "'" + field + "' must be a JSON Schema object, not a string" +
                                (parsed.is_discarded() ? std::string(" (and the string is not JSON either)")
                                                       : std::string(" holding JSON")));
  }
  if (!parameters.is_object()) {
    throw ParamError(field, "'" + field + "' must be a JSON Schema object, not " + std::string(parameters.type_name()));
  }
  if (auto type = parameters.find("type"); type != parameters.end() && *type != "object") {
    throw ParamError(field, "'" + field + "' must be a schema of type \"object\" (a function's arguments are an "
                                          "object), got \"type\": " + type->dump());
  }
}

std::string tool_names(const ojson& tools) {
  std::string out;
  for (const auto& tool : tools) out += (out.empty() ? "" : ", ") + tool["function"]["name"].get<std::string>();
  return out;
}

bool is_mistral_id(std::string_view id) {
  if (id.size() != 9) return false;
  for (char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) return false;
  }
  return true;
}

}  // namespace

ToolRequest parse_tool_request(const ojson& body) {
  ToolRequest out;
  auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) throw ParamError("tools", "'tools' must be a list of tool objects");
    std::set<std::string> names;
    for (size_t i = 0; i < tools->size(); ++i) {
      const ojson& tool = (*tools)[i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!tool.is_object()) throw ParamError(at, "'" + at + "' must be an object {\"type\": \"function\", \"function\": {...}}");
      if (tool.value("type", ojson()) != "function") {
        throw ParamError(at + ".type", "'" + at + ".type' must be \"function\" (the only tool type)");
      }
      auto fn = tool.find("function");
      if (fn == tool.end() || !fn->is_object()) {
        throw ParamError(at + ".function", "'" + at + ".function' must be an object {\"name\", \"parameters\"}");
      }
      auto name = fn->find("name");
      if (name == fn->end() || !name->is_string() || name->get<std::string>().empty()) {
        throw ParamError(at + ".function.name", "'" + at + ".function.name' must be a non-empty string");
      }
      if (!names.insert(name->get<std::string>()).second) {
        throw ParamError(at + ".function.name", "'" + at + ".function.name': the tool '" + name->get<std::string>() +
                                                    "' is listed twice");
      }
      if (auto params = fn->find("parameters"); params != fn->end() && !params->is_null()) {
        check_parameters(*params, at + ".function.parameters");
      }
    }
    out.tools = *tools;
  }
  out.choice = out.tools.empty() ? ToolChoiceMode::none : ToolChoiceMode::automatic;
  auto choice = body.find("tool_choice");
  if (choice == body.end() || choice->is_null()) return out;
  const auto needs_tools = [&](const std::string& what) {
    if (out.tools.empty()) throw ParamError("tool_choice", "'tool_choice' " + what + " needs a non-empty 'tools'");
  };
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") {
      out.choice = ToolChoiceMode::none;
    } else if (c == "auto") {
      // auto without tools: nothing to call
    } else if (c == "required") {
      needs_tools("\"required\"");
      out.choice = ToolChoiceMode::required;
    } else {
      throw ParamError("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                                      "\"function\", \"function\": {\"name\": ...}}, got \"" + c + "\"");
    }
    return out;
  }
  const ojson* name = nullptr;
  if (choice->is_object() && choice->value("type", ojson()) == "function") {
    if (auto fn = choice->find("function"); fn != choice->end() && fn->is_object()) {
      if (auto n = fn->find("name"); n != fn->end() && n->is_string()) name = &*n;
    }
  }
  if (!name) {
    throw ParamError("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                                    "\"function\", \"function\": {\"name\": ...}}, got " + choice->dump());
  }
  needs_tools("naming a function");
  out.named_tool = name->get<std::string>();
  bool found = false;
  for (const auto& tool : out.tools) found = found || tool["function"]["name"] == out.named_tool;
  if (!found) {
    throw ParamError("tool_choice", "'tool_choice' names the function '" + out.named_tool +
                                        "', which is not in 'tools' (" + tool_names(out.tools) + ")");
  }
  out.choice = ToolChoiceMode::named;
  return out;
}

ojson tool_choice_schema(const ToolRequest& request) {
  const auto parameters = [](const ojson& tool) {
    const ojson& fn = tool["function"];
    auto p = fn.find("parameters");
    return p != fn.end() && !p->is_null() ? *p : ojson{{"type", "object"}, {"properties", ojson::object()}};
  };
  if (request.choice == ToolChoiceMode::named) {
    for (const auto& tool : request.tools) {
      if (tool["function"]["name"] == request.named_tool) return parameters(tool);
    }
  }
  ojson any_of = ojson::array();
  for (const auto& tool : request.tools) {
    any_of.push_back({{"type", "object"},
                      {"properties",
                       {{"name", {{"type", "string"}, {"enum", {tool["function"]["name"]}}}},
                        {"parameters", parameters(tool)}}},
                      {"required", {"name", "parameters"}},
                      {"additionalProperties", false}});
  }
  return {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", any_of}}}};
}

ToolOutputFormat tool_output_format(const ToolRequest& request, ToolParser family) {
  ToolOutputFormat format;
  format.parser = family;
  switch (request.choice) {
    case ToolChoiceMode::none: format.parser = ToolParser::none; break;
    case ToolChoiceMode::automatic: break;
    case ToolChoiceMode::required: format.shape = ToolOutputFormat::Shape::call_list; break;
    case ToolChoiceMode::named:
      format.shape = ToolOutputFormat::Shape::arguments;
      format.tool_name = request.named_tool;
      break;
  }
  return format;
}

void check_tool_messages(const std::vector<ChatMessage>& messages, ToolParser family) {
  if (family != ToolParser::mistral) return;
  const std::string why = " (this model's template matches a tool result to its call by a 9-character "
                          "alphanumeric id)";
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (m.role == "tool" && !is_mistral_id(m.tool_call_id)) {
      throw ParamError(at + ".tool_call_id", m.tool_call_id.empty()
                                                 ? "'" + at + ".tool_call_id' is required" + why
                                                 : "'" + at + ".tool_call_id' = '" + m.tool_call_id +
                                                       "' is not 9 alphanumerics" + why);
    }
    if (!m.tool_calls.is_list()) continue;
    const auto& calls = m.tool_calls.as_list();
    for (size_t j = 0; j < calls.size(); ++j) {
      const jinja::Value* id = calls[j].is_dict() ? calls[j].as_dict().find("id") : nullptr;
      if (!id || !id->is_string() || !is_mistral_id(id->as_string())) {
        const std::string field = at + ".tool_calls[" + std::to_string(j) + "].id";
        throw ParamError(field, "'" + field + "' must be 9 alphanumerics" + why);
      }
    }
  }
}

}  // namespace llmk::ipc
