#include "ipc/tool_call_parser.hpp"

#include <nlohmann/json.hpp>

#include <random>

namespace llmk::ipc {
namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr std::string_view kLlamaMarker = "<|python_tag|>";

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

// Where the whitespace at the end of s begins.
size_t trailing_ws(std::string_view s) {
  size_t i = s.size();
  while (i > 0 && is_ws(s[i - 1])) --i;
  return i;
}

enum class Scan { incomplete, complete, invalid };

// The string literal at s[i] == '"'; `end` one past its closing quote.
Scan scan_string(std::string_view s, size_t i, size_t& end) {
  for (size_t j = i + 1; j < s.size(); ++j) {
    if (s[j] == '\\') {
      ++j;
    } else if (s[j] == '"') {
      end = j + 1;
      return Scan::complete;
    } else if (static_cast<unsigned char>(s[j]) < 0x20) {
      return Scan::invalid;
    }
  }
  return Scan::incomplete;
}

// The JSON value at s[i]: its extent only (strings, nesting, scalars); the
// text is checked by a JSON parser once complete. A scalar is complete once
// a character that cannot continue it follows.
Scan scan_value(std::string_view s, size_t i, size_t& end) {
  if (i >= s.size()) return Scan::incomplete;
  const char c = s[i];
  if (c == '"') return scan_string(s, i, end);
  if (c == '{' || c == '[') {
    std::string open;
    for (size_t j = i; j < s.size(); ++j) {
      const char d = s[j];
      if (d == '"') {
        size_t e = 0;
        const Scan r = scan_string(s, j, e);
        if (r != Scan::complete) return r;
        j = e - 1;
      } else if (d == '{' || d == '[') {
        open.push_back(d);
      } else if (d == '}' || d == ']') {
        if (open.empty() || open.back() != (d == '}' ? '{' : '[')) return Scan::invalid;
        open.pop_back();
        if (open.empty()) {
          end = j + 1;
          return Scan::complete;
        }
      }
    }
    return Scan::incomplete;
  }
  const auto scalar_char = [](char d) {
    return (d >= '0' && d <= '9') || (d >= 'a' && d <= 'z') || (d >= 'A' && d <= 'Z') || d == '-' || d == '+' ||
           d == '.';
  };
  if (c != '-' && !(c >= '0' && c <= '9') && c != 't' && c != 'f' && c != 'n') return Scan::invalid;
  size_t j = i;
  while (j < s.size() && scalar_char(s[j])) ++j;
  if (j == s.size()) return Scan::incomplete;
  end = j;
  return Scan::complete;
}

std::optional<std::string> decode_string(std::string_view literal) {
  auto v = nlohmann::json::parse(literal, nullptr, false);
  if (!v.is_string()) return std::nullopt;
  return v.get<std::string>();
}

// One call object {"name": ..., "arguments" | "parameters": {...}} read
// as far as the text goes.
struct CallObjectScan {
  Scan status = Scan::incomplete;
  size_t end = 0;                   // complete: one past the closing brace
  std::optional<std::string> name;  // once its string is complete
  bool has_args = false;            // the arguments' object has begun
  size_t args_begin = 0;
  size_t args_end = 0;              // the text's end while incomplete
};

// s[start] == '{'. Keys other than name, arguments, parameters, id and
// type make it invalid (JSON that is not a call is left as text early).
CallObjectScan scan_call_object(std::string_view s, size_t start) {
  CallObjectScan out;
  const auto invalid = [&] {
    out.status = Scan::invalid;
    return out;
  };
  size_t i = skip_ws(s, start + 1);
  if (i < s.size() && s[i] == '}') {
    out.status = Scan::complete;
    out.end = i + 1;
    return out;
  }
  for (;;) {
    i = skip_ws(s, i);
    if (i >= s.size()) return out;
    if (s[i] != '"') return invalid();
    size_t key_end = 0;
    Scan r = scan_string(s, i, key_end);
    if (r == Scan::invalid) return invalid();
    if (r == Scan::incomplete) return out;
    const auto key = decode_string(s.substr(i, key_end - i));
    if (!key) return invalid();
    const bool is_args = *key == "arguments" || *key == "parameters";
    if (!is_args && *key != "name" && *key != "id" && *key != "type") return invalid();
    i = skip_ws(s, key_end);
    if (i >= s.size()) return out;
    if (s[i] != ':') return invalid();
    i = skip_ws(s, i + 1);
    if (i >= s.size()) return out;
    if (is_args) {
      if (out.has_args || s[i] != '{') return invalid();
      out.has_args = true;
      out.args_begin = i;
    }
    if (*key == "name" && (s[i] != '"' || out.name)) return invalid();
    size_t value_end = 0;
    r = scan_value(s, i, value_end);
    if (r == Scan::invalid) return invalid();
    if (r == Scan::incomplete) {
      if (is_args) out.args_end = s.size();
      return out;
    }
    if (is_args) out.args_end = value_end;
    if (*key == "name") {
      out.name = decode_string(s.substr(i, value_end - i));
      if (!out.name || out.name->empty()) return invalid();
    }
    i = skip_ws(s, value_end);
    if (i >= s.size()) return out;
    if (s[i] == '}') {
      out.status = Scan::complete;
      out.end = i + 1;
      return out;
    }
    if (s[i] != ',') return invalid();
    ++i;
  }
}

}  // namespace

std::string_view tool_parser_name(ToolParser parser) {
  switch (parser) {
    case ToolParser::llama3_json: return "llama3_json";
    case ToolParser::hermes: return "hermes";
    case ToolParser::mistral: return "mistral";
    case ToolParser::none: break;
  }
  return "none";
}

std::optional<ToolParser> tool_parser_from_name(std::string_view name) {
  for (ToolParser p : {ToolParser::none, ToolParser::llama3_json, ToolParser::hermes, ToolParser::mistral}) {
    if (name == tool_parser_name(p)) return p;
  }
  return std::nullopt;
}

ToolParser detect_tool_parser(std::string_view source) {
  const auto has = [&](std::string_view s) { return source.find(s) != std::string_view::npos; };
  if (has(kHermesOpen)) return ToolParser::hermes;
  if (has(kMistralMarker)) return ToolParser::mistral;
  if (has(kLlamaMarker) || (has("<|start_header_id|>") && has("\"parameters\""))) return ToolParser::llama3_json;
  return ToolParser::none;
}

std::string make_tool_call_id(ToolParser parser) {
  static constexpr std::string_view kAlnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<size_t> pick(0, kAlnum.size() - 1);
  const bool mistral = parser == ToolParser::mistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlnum[pick(rng)];
  return id;
}

ToolCallParser::ToolCallParser(ToolOutputFormat format, IdMaker make_id)
    : format_(std::move(format)), make_id_(std::move(make_id)) {
  if (!make_id_) make_id_ = [parser = format_.parser] { return make_tool_call_id(parser); };
}

std::string_view ToolCallParser::marker() const {
  if (format_.shape != ToolOutputFormat::Shape::family) return {};
  switch (format_.parser) {
    case ToolParser::hermes: return kHermesOpen;
    case ToolParser::mistral: return kMistralMarker;
    case ToolParser::llama3_json: return kLlamaMarker;
    case ToolParser::none: break;
  }
  return {};
}

ToolCallStep ToolCallParser::feed(std::string_view text) {
  ToolCallStep step;
  (mode_ == Mode::text ? pending_ : section_) += text;
  run(step, false);
  return step;
}

ToolCallStep ToolCallParser::finish() {
  ToolCallStep step;
  run(step, true);
  return step;
}

void ToolCallParser::run(ToolCallStep& step, bool at_end) {
  while (mode_ == Mode::text ? run_text(step, at_end) : run_section(step, at_end)) {
  }
}

void ToolCallParser::emit_content(ToolCallStep& step, std::string_view text) {
  step.content += text;
  content_ += text;
}

void ToolCallParser::open_section(std::string opener, std::string rest, Expect expect) {
  mode_ = Mode::section;
  opener_ = std::move(opener);
  section_ = std::move(rest);
  pos_ = 0;
  expect_ = expect;
  num_section_calls_ = 0;
  pending_.clear();
}

void ToolCallParser::close_section(size_t resume_at) {
  pending_ = section_.substr(std::min(resume_at, section_.size()));
  section_.clear();
  opener_.clear();
  mode_ = Mode::text;
}

// The section is not calls after all. Before any call of it went out: its
// marker is content and the rest is read again as text. After: the stream
// cannot take the call back; the rest is text and the output is malformed.
void ToolCallParser::fail_section(ToolCallStep& step) {
  if (num_section_calls_ == 0) {
    emit_content(step, opener_);
    close_section(0);
  } else {
    malformed_ = true;
    close_section(pos_);
  }
  header_sent_ = false;
}

bool ToolCallParser::run_text(ToolCallStep& step, bool at_end) {
  if (pending_.empty()) return false;
  using Shape = ToolOutputFormat::Shape;
  if (at_start_) {
    const size_t i = skip_ws(pending_, 0);
    if (i == pending_.size()) {
      if (at_end) {
        emit_content(step, pending_);
        pending_.clear();
      }
      return false;
    }
    at_start_ = false;
    const char c = pending_[i];
    std::optional<Expect> implicit;
    if (format_.shape == Shape::arguments && c == '{') implicit = Expect::bare_arguments;
    if (format_.shape == Shape::call_list && c == '[') implicit = Expect::list_open;
    if (format_.shape == Shape::family && format_.parser == ToolParser::llama3_json && c == '{')
      implicit = Expect::object;
    if (format_.shape == Shape::family && format_.parser == ToolParser::mistral && c == '[')
      implicit = Expect::list_open;
    if (implicit) {
      open_section(pending_.substr(0, i), pending_.substr(i), *implicit);
      return true;
    }
  }
  const std::string_view m = marker();
  if (!m.empty()) {
    if (const size_t p = pending_.find(m); p != std::string::npos) {
      const size_t ws = trailing_ws(std::string_view(pending_).substr(0, p));
      emit_content(step, std::string_view(pending_).substr(0, ws));
      open_section(pending_.substr(ws, p + m.size() - ws), pending_.substr(p + m.size()),
                   format_.parser == ToolParser::mistral ? Expect::list_open : Expect::object);
      return true;
    }
  }
  if (at_end) {
    const size_t keep = calls_.empty() ? pending_.size() : trailing_ws(pending_);
    emit_content(step, std::string_view(pending_).substr(0, keep));
    pending_.clear();
    return false;
  }
  // Held back: a marker's beginning at the end, and the whitespace before it.
  size_t hold = pending_.size();
  for (size_t n = std::min(m.empty() ? 0 : m.size() - 1, pending_.size()); n > 0; --n) {
    if (std::string_view(pending_).substr(pending_.size() - n) == m.substr(0, n)) {
      hold = pending_.size() - n;
      break;
    }
  }
  hold = trailing_ws(std::string_view(pending_).substr(0, hold));
  emit_content(step, std::string_view(pending_).substr(0, hold));
  pending_.erase(0, hold);
  return false;
}

bool ToolCallParser::run_section(ToolCallStep& step, bool at_end) {
  const size_t i = skip_ws(section_, pos_);
  switch (expect_) {
    case Expect::list_open:
      if (i == section_.size()) {
        if (!at_end) return false;
        fail_section(step);
        return true;
      }
      if (section_[i] != '[') {
        fail_section(step);
        return true;
      }
      pos_ = i + 1;
      expect_ = Expect::object;
      return true;
    case Expect::object:
      if (i == section_.size()) {
        if (!at_end) return false;
        if (num_section_calls_ > 0) close_section(pos_);
        else fail_section(step);
        return true;
      }
      if (section_[i] != '{') {
        // Llama: "; text" after a call ends the calls.
        if (num_section_calls_ > 0 && format_.parser == ToolParser::llama3_json &&
            format_.shape == ToolOutputFormat::Shape::family) {
          close_section(pos_);
        } else {
          fail_section(step);
        }
        return true;
      }
      pos_ = i;
      expect_ = Expect::in_object;
      return true;
    case Expect::in_object:
      return run_object(step, at_end);
    case Expect::bare_arguments:
      return run_bare_arguments(step, at_end);
    case Expect::after_object:
      return run_after_object(step, at_end);
  }
  return false;
}

void ToolCallParser::begin_call(ToolCallStep& step, const std::string& name) {
  calls_.push_back({make_id_(), name, ""});
  step.calls.push_back({calls_.size() - 1, calls_.back().id, name, ""});
  header_sent_ = true;
  args_sent_ = 0;
  ++num_section_calls_;
}

void ToolCallParser::add_arguments(ToolCallStep& step, std::string_view piece) {
  if (piece.empty()) return;
  calls_.back().arguments += piece;
  step.calls.push_back({calls_.size() - 1, "", "", std::string(piece)});
}

bool ToolCallParser::run_object(ToolCallStep& step, bool at_end) {
  const CallObjectScan scan = scan_call_object(section_, pos_);
  if (scan.status == Scan::invalid) {
    fail_section(step);
    return true;
  }
  if (!header_sent_ && scan.name && (scan.has_args || scan.status == Scan::complete)) begin_call(step, *scan.name);
  if (header_sent_ && scan.has_args && scan.args_end - scan.args_begin > args_sent_) {
    add_arguments(step, std::string_view(section_).substr(scan.args_begin + args_sent_,
                                                          scan.args_end - scan.args_begin - args_sent_));
    args_sent_ = scan.args_end - scan.args_begin;
  }
  if (scan.status == Scan::incomplete) {
    if (!at_end) return false;
    fail_section(step);
    return true;
  }
  if (!header_sent_) {  // a complete object without a name
    fail_section(step);
    return true;
  }
  if (!scan.has_args) {
    add_arguments(step, "{}");
  } else if (!nlohmann::json::accept(calls_.back().arguments)) {
    fail_section(step);
    return true;
  }
  header_sent_ = false;
  pos_ = scan.end;
  expect_ = Expect::after_object;
  return true;
}

bool ToolCallParser::run_bare_arguments(ToolCallStep& step, bool at_end) {
  if (!header_sent_) begin_call(step, format_.tool_name);
  size_t end = 0;
  const Scan r = scan_value(section_, pos_, end);
  if (r == Scan::invalid || (r == Scan::incomplete && at_end)) {
    fail_section(step);
    return true;
  }
  const size_t upto = r == Scan::complete ? end : section_.size();
  if (upto - pos_ > args_sent_) {
    add_arguments(step, std::string_view(section_).substr(pos_ + args_sent_, upto - pos_ - args_sent_));
    args_sent_ = upto - pos_;
  }
  if (r == Scan::incomplete) return false;
  if (!nlohmann::json::accept(calls_.back().arguments)) {
    fail_section(step);
    return true;
  }
  header_sent_ = false;
  close_section(end);
  return true;
}

bool ToolCallParser::run_after_object(ToolCallStep& step, bool at_end) {
  const size_t i = skip_ws(section_, pos_);
  const std::string_view rest = std::string_view(section_).substr(i);
  const bool list = format_.shape == ToolOutputFormat::Shape::call_list || format_.parser == ToolParser::mistral;
  if (list) {
    if (rest.empty()) {
      if (!at_end) return false;
      close_section(pos_);  // the list's ']' never came: the calls stand
    } else if (rest[0] == ',') {
      pos_ = i + 1;
      expect_ = Expect::object;
    } else if (rest[0] == ']') {
      close_section(i + 1);
    } else {
      fail_section(step);
    }
    return true;
  }
  if (format_.parser == ToolParser::hermes) {
    if (rest.substr(0, kHermesClose.size()) == kHermesClose) {
      close_section(i + kHermesClose.size());
      return true;
    }
    if (!at_end && kHermesClose.substr(0, rest.size()) == rest) return false;
    close_section(pos_);  // no closing tag: the text after the call is text
    return true;
  }
  // llama3_json: calls separated by ';'
  if (rest.empty()) {
    if (!at_end) return false;
    close_section(pos_);
  } else if (rest[0] == ';') {
    pos_ = i + 1;
    expect_ = Expect::object;
  } else {
    close_section(pos_);
  }
  return true;
}

ParsedToolOutput parse_tool_output(const ToolOutputFormat& format, std::string_view text,
                                   ToolCallParser::IdMaker make_id) {
  ToolCallParser parser(format, std::move(make_id));
  parser.feed(text);
  parser.finish();
  ParsedToolOutput out;
  if (parser.malformed() || parser.calls().empty()) {
    out.content = std::string(text);
    return out;
  }
  out.calls = parser.calls();
  if (!parser.content().empty()) out.content = parser.content();
  return out;
}

}  // namespace llmk::ipc
