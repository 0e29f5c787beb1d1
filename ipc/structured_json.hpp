// Structured-output fields of a request (docs/structured_outputs.md), shared
// by the OpenAI-compatible HTTP API and the ZeroMQ protocol:
//
//   response_format   {"type": "text"} | {"type": "json_object"} |
//                     {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}
//   structured_outputs {"json": schema} | {"regex": str} | {"grammar": EBNF str} | {"choice": [str]}
//                     (vLLM's names; exactly one key)
//   guided_json, guided_regex, guided_grammar, guided_choice
//                     (vLLM's earlier names for the same four)
//
// At most one of them may ask for a grammar. Shapes are checked here
// (ParamError naming the field); the grammar itself is compiled by the
// engine, whose refusal names the field too.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "core/grammar.hpp"

namespace llmk::ipc {

// The grammar the body's fields ask for; null when none (or response_format text).
std::shared_ptr<const StructuredOutput> parse_structured_output(const nlohmann::json& body);

// The fields parse_structured_output reads, for parsers that refuse unknown ones.
inline constexpr const char* kStructuredOutputFields[] = {"response_format", "structured_outputs", "guided_json",
                                                          "guided_regex", "guided_grammar", "guided_choice"};

}  // namespace llmk::ipc
