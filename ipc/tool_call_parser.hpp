// Tool calls in a model's output, read in the format its family's chat
// template teaches (docs/tool_calls.md):
//
//   llama3_json (Llama 3.1, 3.2): {"name": N, "parameters": {...}}, several
//     separated by ';', at the start of the output or after <|python_tag|>
//   hermes (Qwen2.5, Hermes): <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>,
//     one block per call, after any text
//   mistral (Mistral v0.3): [TOOL_CALLS] [{"name": N, "arguments": {...}}, ...];
//     the marker is a control token that decoding drops, so a list at the
//     start of the output counts as well
//
// "arguments" and "parameters" are read alike in every family. A call's
// arguments are kept as the text the model wrote (a JSON object), which is
// what OpenAI's API returns as "arguments".
//
// The parser is incremental: fed the output piece by piece it says at each
// step which text is content and which pieces of which calls are known, so
// a stream can send OpenAI's delta.tool_calls as the model writes them.
// Text that could still become a call marker (a marker's prefix, or the
// start of a call at the start of the output) is held back until it is
// decided; whitespace right before a call, and after the last one, is
// dropped. Fed all at once or one byte at a time, the pieces join to the
// same result (parse_tool_output).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace llmk {
class ChatTemplate;
}

namespace llmk::ipc {

// The families, named as vLLM names its parsers (--tool-call-parser).
enum class ToolParser { none, llama3_json, hermes, mistral };

std::string_view tool_parser_name(ToolParser parser);
// "none", "llama3_json", "hermes", "mistral"; nullopt for another name.
std::optional<ToolParser> tool_parser_from_name(std::string_view name);
// The family whose call format a Jinja template's source, or a text it
// rendered, shows by its markers: <tool_call> (hermes), [TOOL_CALLS]
// (mistral), <|python_tag|> or a Llama 3 header with "parameters"
// (llama3_json); none when it shows none.
ToolParser detect_tool_parser(std::string_view chat_template_text);
// The family a chat template writes a call in: renders one tool call and
// its result (ipc/tool_parser_detect.cpp) and reads the markers in the
// text. none for a built-in template or one that refuses the conversation.
ToolParser detect_tool_parser(const ChatTemplate& chat);

// A call id: Mistral's templates want 9 alphanumerics (they refuse a tool
// result whose tool_call_id is not); others get OpenAI's "call_" + 24.
std::string make_tool_call_id(ToolParser parser);

// What the output is read as. `family`: the family's own format.
// `call_list`: a bare JSON list [{"name", "parameters" | "arguments"}, ...]
// (the shape tool_choice "required" constrains the output to). `arguments`:
// the whole output is the arguments object of `tool_name` (tool_choice
// naming one tool).
struct ToolOutputFormat {
  enum class Shape { family, call_list, arguments };
  ToolParser parser = ToolParser::none;  // its ids, and for `family` its markers
  Shape shape = Shape::family;
  std::string tool_name;  // arguments

  // Whether the output is read as calls at all: always for the constrained
  // shapes (a model with no tool format gets OpenAI's ids), and for
  // `family` when the model has a format.
  bool reads_calls() const { return shape != Shape::family || parser != ToolParser::none; }
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object's text, as the model wrote it ("{}" when it wrote none)
};

// One piece of one call, in OpenAI's delta.tool_calls shape: a call's first
// piece has its id and name (and empty arguments); later ones add text to
// its arguments.
struct ToolCallDelta {
  size_t index = 0;  // the call's position in the output
  std::string id;    // first piece only
  std::string name;  // first piece only
  std::string arguments;
};

struct ToolCallStep {
  std::string content;               // text decided to be content
  std::vector<ToolCallDelta> calls;  // in order
};

class ToolCallParser {
 public:
  using IdMaker = std::function<std::string()>;
  // make_id: the calls' ids (default make_tool_call_id(format.parser)).
  explicit ToolCallParser(ToolOutputFormat format, IdMaker make_id = {});

  // The next piece of output (whole UTF-8 characters).
  ToolCallStep feed(std::string_view text);
  // The output ended: what was held back, decided.
  ToolCallStep finish();

  const std::vector<ToolCall>& calls() const { return calls_; }
  const std::string& content() const { return content_; }
  // A call whose first piece was already out turned out not to parse
  // (cut short, arguments that are not JSON): the stream cannot take it
  // back; parse_tool_output gives the whole output as content instead.
  bool malformed() const { return malformed_; }

 private:
  enum class Mode { text, section };
  enum class Expect { list_open, object, in_object, after_object, bare_arguments };

  void run(ToolCallStep& step, bool at_end);
  bool run_text(ToolCallStep& step, bool at_end);
  bool run_section(ToolCallStep& step, bool at_end);
  bool run_object(ToolCallStep& step, bool at_end);
  bool run_after_object(ToolCallStep& step, bool at_end);
  bool run_bare_arguments(ToolCallStep& step, bool at_end);
  void begin_call(ToolCallStep& step, const std::string& name);
  void add_arguments(ToolCallStep& step, std::string_view piece);
  void open_section(std::string opener, std::string rest, Expect expect);
  void close_section(size_t resume_at);
  void fail_section(ToolCallStep& step);
  void emit_content(ToolCallStep& step, std::string_view text);
  std::string_view marker() const;

  const ToolOutputFormat format_;
  IdMaker make_id_;
  Mode mode_ = Mode::text;
  bool at_start_ = true;  // nothing but whitespace decided so far
  std::string pending_;   // text mode: undecided text
  // section mode: the text from the marker on; `pos_` what is consumed
  std::string opener_;  // the marker (or leading whitespace) the section began with
  std::string section_;
  size_t pos_ = 0;
  Expect expect_ = Expect::object;
  size_t num_section_calls_ = 0;  // calls the current section has begun
  // the call being read
  bool header_sent_ = false;
  size_t args_sent_ = 0;
  std::string content_;
  std::vector<ToolCall> calls_;
  bool malformed_ = false;
};

struct ParsedToolOutput {
  std::optional<std::string> content;  // nullopt: the output was calls only
  std::vector<ToolCall> calls;
};

// A whole output. With no calls (or a malformed one) the content is the
// output unchanged.
ParsedToolOutput parse_tool_output(const ToolOutputFormat& format, std::string_view text,
                                   ToolCallParser::IdMaker make_id = {});

}  // namespace llmk::ipc
