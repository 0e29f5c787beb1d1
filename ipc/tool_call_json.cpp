#include "ipc/tool_call_json.hpp"

namespace llmk::ipc {

using nlohmann::json;

json tool_calls_json(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const ToolCall& c : calls) {
    out.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

json tool_call_deltas_json(const std::vector<ToolCallDelta>& deltas) {
  json out = json::array();
  for (const ToolCallDelta& d : deltas) {
    if (!d.name.empty()) {
      out.push_back({{"index", d.index},
                     {"id", d.id},
                     {"type", "function"},
                     {"function", {{"name", d.name}, {"arguments", d.arguments}}}});
    } else if (!out.empty() && out.back()["index"] == d.index) {
      out.back()["function"]["arguments"] = out.back()["function"]["arguments"].get<std::string>() + d.arguments;
    } else {
      out.push_back({{"index", d.index}, {"function", {{"arguments", d.arguments}}}});
    }
  }
  return out;
}

std::string tool_finish_reason(const std::string& finish_reason, bool made_calls) {
  return made_calls && finish_reason == "stop" ? "tool_calls" : finish_reason;
}

}  // namespace llmk::ipc
