// A chat request's "tools" and "tool_choice" (OpenAI's shapes), validated,
// and what they ask of the model's output (docs/tool_calls.md):
//
//   none      the tools are not given to the template; the output is text
//   auto      the template offers the tools; the output is read in the
//             family's format (ipc/tool_call_parser.hpp)
//   required  the output must be one or more calls: constrained to a JSON
//             list [{"name", "parameters"}, ...] over the tools (anyOf)
//   named     {"type": "function", "function": {"name": N}}: the output must
//             be N's arguments, constrained to N's parameters schema
//
// required and named need the structured-output engine; tool_choice_schema
// builds the JSON Schema it enforces.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/chat_template.hpp"
#include "ipc/tool_call_parser.hpp"

namespace llmk::ipc {

enum class ToolChoiceMode { none, automatic, required, named };

struct ToolRequest {
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // validated, the sender's key order kept
  ToolChoiceMode choice = ToolChoiceMode::none;
  std::string named_tool;  // named: the tool's name

  // Whether the template is given the tools.
  bool offered() const { return !tools.empty() && choice != ToolChoiceMode::none; }
  // Whether the output must be calls (the structured-output engine enforces it).
  bool constrained() const { return choice == ToolChoiceMode::required || choice == ToolChoiceMode::named; }
};

// Reads "tools" and "tool_choice" from a chat body. Throws ParamError naming
// the field: `tools` not a list; `tools[i]` not an object; `tools[i].type`
// other than "function"; `tools[i].function` missing; `tools[i].function.name`
// missing, empty or repeated; `tools[i].function.parameters` not a JSON
// Schema object (a string, even one holding JSON, or a schema whose "type"
// is not "object"); `tool_choice` not one of the four forms, naming a tool
// that is not in `tools`, or required/named without tools. tool_choice
// defaults to auto with tools and none without.
ToolRequest parse_tool_request(const nlohmann::ordered_json& body);

// The JSON Schema the output must match under required (a list of at least
// one call, each {"name": one of the tools, "parameters": its schema}) or
// named (the tool's parameters). Requires request.constrained().
nlohmann::ordered_json tool_choice_schema(const ToolRequest& request);

// How the output is read: the family's format under auto, the constrained
// shapes under required and named. parser none under none.
ToolOutputFormat tool_output_format(const ToolRequest& request, ToolParser family);

// The tool turns a family's template needs to render: Mistral's matches a
// result to its call by a 9-character alphanumeric id, so a tool message
// needs one in tool_call_id and every assistant tool call one in id.
// Throws ParamError naming messages[i].tool_call_id or
// messages[i].tool_calls[j].id.
void check_tool_messages(const std::vector<ChatMessage>& messages, ToolParser family);

}  // namespace llmk::ipc
