#include "ipc/openai.hpp"

#include <chrono>

#include "core/error.hpp"
#include "ipc/errors.hpp"
#include "ipc/request_json.hpp"
#include "ipc/structured_json.hpp"
#include "ipc/tool_call_json.hpp"
#include "ipc/tool_choice.hpp"

namespace llmk::ipc {
namespace {

using nlohmann::json;

// OpenAI's tool_calls, as the template sees them: the sender's key order
// kept, and each function's "arguments" JSON string parsed into an object
// when it parses (templates write arguments with tojson, as vLLM passes them).
jinja::Value parse_tool_calls(const nlohmann::ordered_json& calls) {
  if (!calls.is_array()) throw ParamError("messages", "'tool_calls' must be a list");
  nlohmann::ordered_json converted = calls;
  for (auto& call : converted) {
    if (!call.is_object()) throw ParamError("messages", "each tool call must be an object");
    auto fn = call.find("function");
    if (fn == call.end() || !fn->is_object()) throw ParamError("messages", "each tool call needs a 'function' object");
    auto args = fn->find("arguments");
    if (args != fn->end() && args->is_string()) {
      auto parsed = nlohmann::ordered_json::parse(args->get<std::string>(), nullptr, false);
      if (!parsed.is_discarded()) *args = std::move(parsed);
    }
  }
  return jinja::Value::from_json(converted);
}

// `ordered`: the same messages parsed keeping key order (for tool_calls).
std::vector<ChatMessage> parse_messages(const json& body, const nlohmann::ordered_json& ordered) {
  auto it = body.find("messages");
  if (it == body.end()) throw ParamError("messages", "'messages' is required");
  if (!it->is_array()) throw ParamError("messages", "'messages' must be a list of {role, content} objects");
  if (it->empty()) throw ParamError("messages", "'messages' is empty");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    if (!m.is_object()) throw ParamError("messages", "each message must be an object with 'role' and 'content'");
    ChatMessage msg;
    msg.role = get_string(m, "role", "");
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool") {
      throw ParamError("messages", "message role must be system, user, assistant or tool, got '" + msg.role + "'");
    }
    if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
      if (msg.role != "assistant") throw ParamError("messages", "only assistant messages have 'tool_calls'");
      msg.tool_calls = parse_tool_calls(ordered["messages"][i]["tool_calls"]);
    }
    msg.tool_call_id = get_string(m, "tool_call_id", "");
    msg.name = get_string(m, "name", "");
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (msg.tool_calls.is_undefined()) throw ParamError("messages", "each message needs a 'content'");
      msg.null_content = true;  // an assistant turn made only of tool calls
    } else if (content->is_string()) {
      msg.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (const auto& part : *content) {  // [{"type": "text", "text": ...}]
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          throw ParamError("messages", "only text content parts are supported");
        }
        msg.content += part["text"].get<std::string>();
      }
    } else {
      throw ParamError("messages", "message 'content' must be a string or a list of text parts");
    }
    messages.push_back(std::move(msg));
  }
  return messages;
}

// The tools the template is given (OpenAI's function schemas, key order
// kept): none under tool_choice "none".
ChatRenderOptions chat_options(const ToolRequest& tools) {
  ChatRenderOptions options;
  if (tools.offered()) options.tools = jinja::Value::from_json(tools.tools);
  return options;
}

json bytes_of(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

}  // namespace

namespace {

// Fields of OpenAI's API that change what a reply must be, which llmk does
// not implement: a request that uses one is refused with 400 naming it,
// never answered as if the field were absent (a client asking for JSON
// must not get free text with a 200). Their neutral values pass.
void refuse_unimplemented(const json& body, OpenAiEndpoint endpoint) {
  auto refuse = [](const std::string& field, const std::string& what) {
    throw ParamError(field, "'" + field + "'" + (what.empty() ? "" : " " + what) + " is not supported by this server",
                     ErrorCode::unsupported);
  };
  auto present = [&](const char* field) { return body.contains(field) && !body[field].is_null(); };
  // Chat reads tools and tool_choice itself (ipc/tool_choice.hpp).
  const bool chat = endpoint == OpenAiEndpoint::chat;
  for (const char* field : {"tools", "functions", "logit_bias"}) {
    const json& v = present(field) && !(chat && std::string(field) == "tools") ? body[field] : json();
    if (!v.is_null() && !v.empty()) refuse(field, "(non-empty)");
  }
  for (const char* field : {"tool_choice", "function_call"}) {
    if (chat && std::string(field) == "tool_choice") continue;
    if (present(field) && body[field] != "none" && body[field] != "auto") refuse(field, "other than \"none\" or \"auto\"");
  }
  if (present("suffix")) refuse("suffix", "");
  if (present("prediction")) refuse("prediction", "");
  if (present("audio")) refuse("audio", "");
  if (present("modalities") && body["modalities"] != json::array({"text"})) refuse("modalities", "other than [\"text\"]");
}

}  // namespace

OpenAiRequest parse_openai_request(OpenAiEndpoint endpoint, const std::string& body_text, const Backend& backend) {
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number that overflows
    throw ProtocolError(ProtocolFailure::malformed, std::string("malformed JSON body: ") + e.what());
  }
  if (!body.is_object()) throw ProtocolError(ProtocolFailure::malformed, "the body must be a JSON object");
  const ModelInfo model = backend.model_info();
  const std::string model_name = get_string(body, "model", model.name);
  if (model_name != model.name) {
    throw ParamError("model", "the model '" + model_name + "' does not exist; this server serves '" + model.name + "'",
                     ErrorCode::not_found);
  }
  OpenAiRequest out;
  out.endpoint = endpoint;
  out.stream = get_bool(body, "stream", false);
  std::string tool_schema;  // tool_choice required or named: the JSON Schema the output is held to
  if (auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) throw ParamError("stream_options", "'stream_options' must be an object");
    out.include_usage = get_bool(*so, "include_usage", false);
  }
  if (endpoint == OpenAiEndpoint::completions) {
    if (!body.contains("prompt")) throw ParamError("prompt", "'prompt' is required");
    parse_prompt(body["prompt"], "prompt", model.vocab_size, out.request);
    if (get_bool(body, "echo", false)) throw ParamError("echo", "'echo' is not supported", ErrorCode::unsupported);
    out.request.sampling = parse_sampling(body, LogprobsStyle::integer, model.max_context);
    out.request.strict_context = true;  // prompt + max_tokens must fit, as OpenAI's API asks
  } else {
    // The backend renders the chat with the model's template and tokenizes it.
    const auto ordered = nlohmann::ordered_json::parse(body_text);
    const ToolRequest tools = parse_tool_request(ordered);
    std::vector<ChatMessage> messages = parse_messages(body, ordered);
    check_tool_messages(messages, model.tool_parser);
    if (tools.constrained()) tool_schema = tool_choice_schema(tools).dump();
    out.tool_format = tool_output_format(tools, model.tool_parser);
    out.request.chat = std::make_shared<const ChatInput>(ChatInput{std::move(messages), chat_options(tools)});
    out.request.sampling = parse_sampling(body, LogprobsStyle::chat, model.max_context);
    if (!body.contains("max_tokens") && !body.contains("max_completion_tokens")) {
      // As OpenAI: without a limit, a chat reply may fill the context (and
      // stops there with finish_reason "length").
      out.request.sampling.max_tokens = std::max<int32_t>(1, model.max_context);
    } else {
      out.request.strict_context = true;
    }
  }
  if (out.stream && out.request.sampling.beam_width > 0)
    throw ParamError("stream", "'stream' is not supported with beam search (its beams are ranked only at the end)");
  if (auto best_of = body.find("best_of"); best_of != body.end() && !best_of->is_null() && *best_of != 1 &&
                                            out.request.sampling.beam_width == 0) {
    throw ParamError("best_of", "'best_of' other than 1 is not supported", ErrorCode::unsupported);
  }
  refuse_unimplemented(body, endpoint);
  // response_format, structured_outputs, guided_*: compiled by the engine.
  out.request.sampling.structured = parse_structured_output(body);
  if (!tool_schema.empty()) {
    // The calls' JSON, held to the tools' schemas by the structured-output
    // engine (ipc/tool_choice.hpp); the reply reads it as calls.
    if (const auto& so = out.request.sampling.structured) {
      throw ParamError("tool_choice", "'tool_choice' \"required\" or naming a function holds the output to the "
                                      "tools' schemas, so it cannot be combined with '" +
                                          so->field.substr(0, so->field.find('.')) + "'");
    }
    out.request.sampling.structured = std::make_shared<const StructuredOutput>(
        StructuredOutput{GrammarKind::json_schema, std::move(tool_schema), "tool_choice", nullptr});
  }
  if (const auto& so = out.request.sampling.structured; so && !model.structured_outputs_refusal.empty()) {
    const std::string field = so->field.substr(0, so->field.find('.'));
    throw ParamError(field, "'" + field + "': " + model.structured_outputs_refusal, ErrorCode::unsupported);
  }
  parse_bootstrap(body, out.request);
  return out;
}

OpenAiResponse::OpenAiResponse(OpenAiEndpoint endpoint, std::string id, std::string model, const Backend& backend,
                               int32_t num_samples, bool logprobs, ToolOutputFormat tool_format)
    : endpoint_(endpoint),
      id_(std::move(id)),
      model_(std::move(model)),
      backend_(backend),
      logprobs_(logprobs),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count()),
      tool_format_(std::move(tool_format)),
      choices_(static_cast<size_t>(std::max(1, num_samples))) {}

json OpenAiResponse::logprobs_delta(const RequestEvent& ev, size_t text_offset) const {
  if (!logprobs_) return nullptr;
  if (endpoint_ == OpenAiEndpoint::completions) {
    json d = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
    for (const auto& lp : ev.logprobs) {
      const std::string token = backend_.token_text(lp.token_id);
      d["tokens"].push_back(token);
      d["token_logprobs"].push_back(lp.logprob);
      json top = json::object();
      for (const auto& [id, value] : lp.top) top[backend_.token_text(id)] = value;
      d["top_logprobs"].push_back(top);
      d["text_offset"].push_back(text_offset);
      text_offset += token.size();
    }
    return d;
  }
  json content = json::array();
  for (const auto& lp : ev.logprobs) {
    const std::string token = backend_.token_text(lp.token_id);
    json top = json::array();
    for (const auto& [id, value] : lp.top) {
      const std::string t = backend_.token_text(id);
      top.push_back({{"token", t}, {"logprob", value}, {"bytes", bytes_of(t)}});
    }
    content.push_back({{"token", token}, {"logprob", lp.logprob}, {"bytes", bytes_of(token)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

void OpenAiResponse::append_logprobs(Choice& choice, const json& delta) const {
  if (delta.is_null()) return;
  if (choice.logprobs.is_null()) {
    choice.logprobs = delta;
    return;
  }
  for (const auto& [key, values] : delta.items()) {
    for (const auto& v : values) choice.logprobs[key].push_back(v);
  }
}

void OpenAiResponse::count_usage(const RequestEvent& ev) {
  if (!ev.finished) return;
  usage_.prompt_tokens = ev.usage.prompt_tokens;
  usage_.completion_tokens += ev.usage.completion_tokens;
  usage_.cached_prompt_tokens = ev.usage.cached_prompt_tokens;
}

json OpenAiResponse::usage_json() const {
  json u = {{"prompt_tokens", usage_.prompt_tokens},
            {"completion_tokens", usage_.completion_tokens},
            {"total_tokens", usage_.prompt_tokens + usage_.completion_tokens}};
  if (usage_.cached_prompt_tokens > 0) u["prompt_tokens_details"] = {{"cached_tokens", usage_.cached_prompt_tokens}};
  return u;
}

std::vector<json> OpenAiResponse::chunks(const RequestEvent& ev) {
  count_usage(ev);
  std::vector<json> out;
  if (static_cast<size_t>(ev.index) >= choices_.size()) return out;
  Choice& choice = choices_[static_cast<size_t>(ev.index)];
  const bool chat = endpoint_ == OpenAiEndpoint::chat;
  const auto chunk = [&](json choice_json) {
    return json{{"id", id_},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created_},
                {"model", model_},
                {"choices", json::array({std::move(choice_json)})}};
  };
  if (chat && !choice.started) {
    out.push_back(chunk({{"index", ev.index}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                         {"logprobs", nullptr}, {"finish_reason", nullptr}}));
  }
  choice.started = true;
  const json logprobs = logprobs_delta(ev, choice.text.size());
  choice.text += ev.text_delta;
  json finish = ev.finished ? json(finish_reason_string(ev.finish_reason)) : json(nullptr);
  if (!ev.text_delta.empty() || !ev.token_ids.empty() || ev.finished) {
    const json delta = chat ? chat_delta(choice, ev) : json();
    if (ev.finished && choice.tool_calls)
      finish = tool_finish_reason(finish.get<std::string>(), !choice.tool_calls->calls().empty());
    json c = chat ? json{{"index", ev.index}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", finish}}
                  : json{{"index", ev.index}, {"text", ev.text_delta}, {"logprobs", logprobs},
                         {"finish_reason", finish}};
    out.push_back(chunk(std::move(c)));
  }
  return out;
}

// A chat chunk's delta: the text as content, or with tools read through the
// parser (content and delta.tool_calls; text that may be a call's start waits).
json OpenAiResponse::chat_delta(Choice& choice, const RequestEvent& ev) {
  if (!tool_format_.reads_calls()) {
    return ev.text_delta.empty() && ev.finished ? json::object() : json{{"content", ev.text_delta}};
  }
  if (!choice.tool_calls) choice.tool_calls = std::make_shared<ToolCallParser>(tool_format_);
  ToolCallStep step = choice.tool_calls->feed(ev.text_delta);
  if (ev.finished) {
    ToolCallStep last = choice.tool_calls->finish();
    step.content += last.content;
    step.calls.insert(step.calls.end(), last.calls.begin(), last.calls.end());
  }
  json delta = json::object();
  if (!step.content.empty()) delta["content"] = step.content;
  if (!step.calls.empty()) delta["tool_calls"] = tool_call_deltas_json(step.calls);
  if (delta.empty() && !ev.finished) delta["content"] = "";
  return delta;
}

json OpenAiResponse::usage_chunk() const {
  return {{"id", id_},
          {"object", endpoint_ == OpenAiEndpoint::chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", model_},
          {"choices", json::array()},
          {"usage", usage_json()}};
}

void OpenAiResponse::add(const RequestEvent& ev) {
  count_usage(ev);
  if (static_cast<size_t>(ev.index) >= choices_.size()) return;
  Choice& choice = choices_[static_cast<size_t>(ev.index)];
  append_logprobs(choice, logprobs_delta(ev, choice.text.size()));
  choice.text += ev.text_delta;
  if (ev.finished) choice.finish_reason = finish_reason_string(ev.finish_reason);
}

json OpenAiResponse::response() const {
  const bool chat = endpoint_ == OpenAiEndpoint::chat;
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    json logprobs = logprobs_ ? c.logprobs : json(nullptr);
    if (chat && tool_format_.reads_calls()) {
      const ParsedToolOutput parsed = parse_tool_output(tool_format_, c.text);
      json message = {{"role", "assistant"}, {"content", parsed.content ? json(*parsed.content) : json(nullptr)}};
      if (!parsed.calls.empty()) message["tool_calls"] = tool_calls_json(parsed.calls);
      choices.push_back({{"index", i},
                         {"message", message},
                         {"logprobs", logprobs},
                         {"finish_reason", tool_finish_reason(c.finish_reason, !parsed.calls.empty())}});
    } else if (chat) {
      choices.push_back({{"index", i},
                         {"message", {{"role", "assistant"}, {"content", c.text}}},
                         {"logprobs", logprobs},
                         {"finish_reason", c.finish_reason}});
    } else {
      choices.push_back({{"index", i}, {"text", c.text}, {"logprobs", logprobs}, {"finish_reason", c.finish_reason}});
    }
  }
  return {{"id", id_},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", created_},
          {"model", model_},
          {"choices", choices},
          {"usage", usage_json()}};
}

}  // namespace llmk::ipc
