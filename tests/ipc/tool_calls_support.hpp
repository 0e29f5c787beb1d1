// Shared by the tool-call tests: the tools they offer, a deterministic id
// maker, reassembly of streamed pieces, and checking arguments against a
// tool's parameters schema (PyPI's jsonschema when the venv has it, else a
// hand check of the schemas these tests use).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/tool_call_parser.hpp"
#include "support/venv.hpp"

namespace llmk::test {

// Two tools: one with a required string and an enum, one with a required string.
inline const char* const kToolsJson = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"],
      "additionalProperties": false}}},
  {"type": "function", "function": {"name": "get_time", "description": "The local time in a time zone",
    "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"],
      "additionalProperties": false}}}])";

// Ids made in order: call_000000000000000000000000, ... (Mistral: 000000000, ...).
inline ipc::ToolCallParser::IdMaker counting_ids(ipc::ToolParser parser) {
  return [parser, n = 0]() mutable {
    std::string digits = std::to_string(n++);
    const size_t width = parser == ipc::ToolParser::mistral ? 9 : 24;
    digits.insert(0, width - digits.size(), '0');
    return parser == ipc::ToolParser::mistral ? digits : "call_" + digits;
  };
}

// The output fed in pieces (cut at `cuts`, ascending), the pieces joined
// back into one content and one list of calls.
struct Reassembled {
  std::string content;
  std::vector<ipc::ToolCall> calls;
  bool malformed = false;
};

inline Reassembled feed_in_pieces(const ipc::ToolOutputFormat& format, const std::string& text,
                                  const std::vector<size_t>& cuts) {
  ipc::ToolCallParser parser(format, counting_ids(format.parser));
  Reassembled out;
  const auto take = [&](const ipc::ToolCallStep& step) {
    out.content += step.content;
    for (const auto& d : step.calls) {
      if (!d.name.empty()) {
        REQUIRE(d.index == out.calls.size());
        out.calls.push_back({d.id, d.name, ""});
      }
      REQUIRE(d.index < out.calls.size());
      out.calls[d.index].arguments += d.arguments;
    }
  };
  size_t from = 0;
  for (size_t cut : cuts) {
    take(parser.feed(text.substr(from, cut - from)));
    from = cut;
  }
  take(parser.feed(text.substr(from)));
  take(parser.finish());
  out.malformed = parser.malformed();
  return out;
}

// jsonschema's verdict on each {schema, instance}; nullopt when the venv
// has no jsonschema.
inline std::optional<std::vector<bool>> jsonschema_verdicts(const nlohmann::json& cases) {
  if (!have_venv_python()) return std::nullopt;
  const auto dir = std::filesystem::temp_directory_path() / ("llmk_schema_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "cases.json") << cases.dump();
  const std::string cmd = venv_python() + " " + LLMK_SOURCE_DIR "/tests/ipc/tool_schema_check.py " +
                          (dir / "cases.json").string() + " > " + (dir / "out.json").string() + " 2>/dev/null";
  std::optional<std::vector<bool>> verdicts;
  if (std::system(cmd.c_str()) == 0) {
    std::ifstream in(dir / "out.json");
    const auto out = nlohmann::json::parse(in, nullptr, false);
    if (out.is_array()) verdicts = out.get<std::vector<bool>>();
  }
  std::filesystem::remove_all(dir);
  return verdicts;
}

// The hand check for the schemas above: an object holding every required
// property, only declared properties, each a string within its enum.
inline bool matches_tool_schema(const nlohmann::json& schema, const nlohmann::json& args) {
  if (!args.is_object()) return false;
  for (const auto& r : schema.value("required", nlohmann::json::array()))
    if (!args.contains(r.get<std::string>())) return false;
  const auto& props = schema["properties"];
  for (const auto& [key, value] : args.items()) {
    if (!props.contains(key) || !value.is_string()) return false;
    const auto& p = props[key];
    if (p.contains("enum") && std::find(p["enum"].begin(), p["enum"].end(), value) == p["enum"].end()) return false;
  }
  return true;
}

}  // namespace llmk::test
