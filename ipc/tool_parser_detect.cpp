// detect_tool_parser(const ChatTemplate&): what a template writes for a
// call. One assistant turn calling one tool, and the tool's result, are
// rendered with that tool offered; the markers in the text name the family.
#include <nlohmann/json.hpp>

#include "core/chat_template.hpp"
#include "ipc/tool_call_parser.hpp"

namespace llmk::ipc {

ToolParser detect_tool_parser(const ChatTemplate& chat) {
  if (chat.kind() != ChatTemplate::Kind::jinja) return ToolParser::none;
  using ojson = nlohmann::ordered_json;
  // A 9-character id: Mistral's template refuses others.
  const ojson calls = ojson::parse(R"([{"id": "probe0001", "type": "function",
      "function": {"name": "probe_tool", "arguments": {"a": 1}}}])");
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "probe_tool",
      "description": "A probe.", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}])");
  std::vector<ChatMessage> messages(3);
  messages[0] = {"user", "Call the probe."};
  messages[1].role = "assistant";
  messages[1].null_content = true;
  messages[1].tool_calls = jinja::Value::from_json(calls);
  messages[2] = {"tool", "1"};
  messages[2].tool_call_id = "probe0001";
  messages[2].name = "probe_tool";
  ChatRenderOptions options;
  options.tools = jinja::Value::from_json(tools);
  try {
    return detect_tool_parser(chat.render(messages, options));
  } catch (const std::exception&) {
    return ToolParser::none;  // a template that takes no tool turns writes no calls
  }
}

}  // namespace llmk::ipc
