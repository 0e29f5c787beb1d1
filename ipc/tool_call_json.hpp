// Tool calls in OpenAI's response shapes: a message's "tool_calls" and a
// stream chunk's "delta.tool_calls".
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/tool_call_parser.hpp"

namespace llmk::ipc {

// [{"id", "type": "function", "function": {"name", "arguments"}}]
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls);

// [{"index", "id", "type": "function", "function": {"name", "arguments": ""}}
//  | {"index", "function": {"arguments": piece}}]: a call's first piece with
// its id and name, then its arguments' pieces (consecutive ones of a call
// joined).
nlohmann::json tool_call_deltas_json(const std::vector<ToolCallDelta>& deltas);

// A choice's finish_reason: "tool_calls" where a stop ended an output that
// made calls, as OpenAI reports it.
std::string tool_finish_reason(const std::string& finish_reason, bool made_calls);

}  // namespace llmk::ipc
