#include "core/chat_template.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/gguf.hpp"
#include "core/gguf_chat_template.hpp"
#include "core/jinja/template.hpp"
#include "core/tokenizer.hpp"

namespace llmk {

namespace {

std::string strip(std::string_view s) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return std::string(s);
}

void check_messages(std::span<const ChatMessage> messages) {
  if (messages.empty()) throw Error(ErrorCode::invalid_argument, "chat: the message list is empty");
}

void check_builtin_roles(std::span<const ChatMessage> messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      throw Error(ErrorCode::invalid_argument, "chat: message " + std::to_string(i) + " has role '" + role +
                                                   "' (expected system, user or assistant)");
    }
  }
}

// A message as transformers hands it to the template: OpenAI's keys, only
// those that are set.
jinja::Value message_value(const ChatMessage& m) {
  jinja::Dict d;
  d.set("role", jinja::Value(m.role));
  d.set("content", m.null_content ? jinja::Value::none() : jinja::Value(m.content));
  if (!m.tool_calls.is_undefined()) d.set("tool_calls", m.tool_calls);
  if (!m.tool_call_id.empty()) d.set("tool_call_id", jinja::Value(m.tool_call_id));
  if (!m.name.empty()) d.set("name", jinja::Value(m.name));
  return jinja::Value(std::move(d));
}

// tokenizer_config.json writes a special token as a string or as an
// AddedToken object {"content": ...}.
std::string token_text(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  return "";
}

std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return {};
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

ChatTemplate::ChatTemplate(Kind kind) : kind_(kind) {
  if (kind == Kind::jinja) {
    throw Error(ErrorCode::invalid_argument, "chat: a Jinja template is made with ChatTemplate::from_jinja");
  }
}

ChatTemplate ChatTemplate::from_jinja(std::string_view source, ChatSpecialTokens tokens, std::string name,
                                      std::string_view tool_use_source) {
  ChatTemplate t(Kind::llama2);
  t.kind_ = Kind::jinja;
  t.name_ = std::move(name);
  t.jinja_ = std::make_shared<const jinja::Template>(source);
  if (!tool_use_source.empty()) t.tool_use_ = std::make_shared<const jinja::Template>(tool_use_source);
  t.tokens_ = std::make_shared<const ChatSpecialTokens>(std::move(tokens));
  return t;
}

bool is_builtin_chat_template(std::string_view name) {
  return name == "llama-2" || name == "llama2" || name == "chatml";
}

ChatTemplate ChatTemplate::by_name(std::string_view name) {
  if (name == "llama-2" || name == "llama2") return ChatTemplate(Kind::llama2);
  if (name == "chatml") return ChatTemplate(Kind::chatml);
  throw Error(ErrorCode::invalid_argument,
              "unknown chat template '" + std::string(name) + "' (built in: llama-2, chatml)");
}

ChatTemplate ChatTemplate::detect(std::string_view jinja_template) {
  if (jinja_template.find("<|im_start|>") != std::string_view::npos) return ChatTemplate(Kind::chatml);
  if (jinja_template.find("[INST]") != std::string_view::npos) return ChatTemplate(Kind::llama2);
  throw Error(ErrorCode::unsupported,
              "the model's chat_template is neither ChatML nor Llama 2 style; set model.chat_template to "
              "llama-2 or chatml");
}

std::string_view ChatTemplate::name() const {
  switch (kind_) {
    case Kind::llama2: return "llama-2";
    case Kind::chatml: return "chatml";
    case Kind::jinja: return name_;
  }
  return "";
}

std::vector<ChatTemplate::Segment> ChatTemplate::segments(std::span<const ChatMessage> messages) const {
  check_messages(messages);
  check_builtin_roles(messages);
  std::vector<Segment> out;
  auto text = [&](std::string s) {
    if (!out.empty() && out.back().type == Segment::Type::text) {
      out.back().text += s;
    } else {
      out.push_back({Segment::Type::text, std::move(s)});
    }
  };

  if (kind_ == Kind::chatml) {
    for (const auto& m : messages) text("<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n");
    text("<|im_start|>assistant\n");
    return out;
  }

  // llama-2: fold the system message into the first user turn.
  std::vector<ChatMessage> turns(messages.begin(), messages.end());
  if (turns.front().role == "system") {
    if (turns.size() < 2) {
      throw Error(ErrorCode::invalid_argument, "chat (llama-2): a system message must be followed by a user message");
    }
    turns[1].content = "<<SYS>>\n" + turns[0].content + "\n<</SYS>>\n\n" + turns[1].content;
    turns.erase(turns.begin());
  }
  for (size_t i = 0; i < turns.size(); ++i) {
    const char* expected = i % 2 == 0 ? "user" : "assistant";
    if (turns[i].role != expected) {
      throw Error(ErrorCode::invalid_argument,
                  "chat (llama-2): roles must be an optional system message, then alternate user/assistant "
                  "starting with user; turn " + std::to_string(i) + " is '" + turns[i].role + "'");
    }
  }
  if (turns.back().role != "user") {
    throw Error(ErrorCode::invalid_argument, "chat (llama-2): the last message must be from the user");
  }
  for (size_t i = 0; i + 1 < turns.size(); i += 2) {
    out.push_back({Segment::Type::bos, {}});
    text("[INST] " + strip(turns[i].content) + " [/INST] " + strip(turns[i + 1].content) + " ");
    out.push_back({Segment::Type::eos, {}});
  }
  out.push_back({Segment::Type::bos, {}});
  text("[INST] " + strip(turns.back().content) + " [/INST]");
  return out;
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages) const {
  return render(messages, ChatRenderOptions{});
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, const ChatRenderOptions& options) const {
  if (kind_ == Kind::jinja) {
    check_messages(messages);
    const bool has_tools = options.tools.truthy();
    const jinja::Template& tpl = has_tools && tool_use_ ? *tool_use_ : *jinja_;
    jinja::List list;
    for (const auto& m : messages) list.push_back(message_value(m));
    jinja::Dict vars;
    vars.set("messages", jinja::Value(std::move(list)));
    vars.set("tools", options.tools.is_undefined() ? jinja::Value::none() : options.tools);
    vars.set("documents", jinja::Value::none());
    vars.set("add_generation_prompt", jinja::Value(options.add_generation_prompt));
    // As transformers: the special tokens the tokenizer has, by name.
    const std::pair<const char*, const std::string*> tokens[] = {{"bos_token", &tokens_->bos_token},
                                                                  {"eos_token", &tokens_->eos_token},
                                                                  {"unk_token", &tokens_->unk_token},
                                                                  {"pad_token", &tokens_->pad_token}};
    for (const auto& [key, text] : tokens) {
      if (!text->empty()) vars.set(key, jinja::Value(*text));
    }
    return tpl.render(vars);
  }
  std::string prompt;
  for (const auto& s : segments(messages)) {
    switch (s.type) {
      case Segment::Type::text: prompt += s.text; break;
      case Segment::Type::bos: prompt += "<s>"; break;
      case Segment::Type::eos: prompt += "</s>"; break;
    }
  }
  return prompt;
}

std::vector<int32_t> ChatTemplate::encode(std::span<const ChatMessage> messages, const Tokenizer& tokenizer,
                                          bool add_bos) const {
  return encode(messages, ChatRenderOptions{}, tokenizer, add_bos);
}

std::vector<int32_t> ChatTemplate::encode(std::span<const ChatMessage> messages, const ChatRenderOptions& options,
                                          const Tokenizer& tokenizer, bool add_bos) const {
  if (kind_ == Kind::jinja) return tokenizer.encode_with_special_tokens(render(messages, options), false);
  std::vector<int32_t> ids;
  // chatml's text has no BOS of its own (the tokenizer adds it); llama-2 has one per turn.
  if (kind_ == Kind::chatml && add_bos && tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
  for (const auto& s : segments(messages)) {
    switch (s.type) {
      case Segment::Type::text: {
        const auto piece_ids = tokenizer.encode(s.text, false);
        ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
        break;
      }
      case Segment::Type::bos:
        if (tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
        break;
      case Segment::Type::eos:
        if (tokenizer.eos_id() >= 0) ids.push_back(tokenizer.eos_id());
        break;
    }
  }
  return ids;
}

ChatTemplate resolve_chat_template(std::string_view configured, const std::filesystem::path& model_dir) {
  if (is_builtin_chat_template(configured)) return ChatTemplate::by_name(configured);
  const std::string hint = "; set model.chat_template (--chat-template) to a Jinja file, llama-2 or chatml";
  // A GGUF model carries its template and special tokens in its metadata.
  const bool is_gguf = !model_dir.empty() && is_gguf_file(model_dir);
  const auto file = is_gguf ? model_dir : model_dir / "tokenizer_config.json";
  GgufChatTemplate gguf;
  if (is_gguf) gguf = gguf_chat_template(GgufFile(model_dir));
  nlohmann::json config = nlohmann::json::object();
  const bool has_config = !is_gguf && !model_dir.empty() && std::filesystem::is_regular_file(file);
  if (has_config) {
    try {
      config = nlohmann::json::parse(read_file(file));
    } catch (const nlohmann::json::exception& e) {
      throw Error(ErrorCode::bad_checkpoint, file.string() + " is not valid JSON: " + e.what());
    }
    if (!config.is_object()) throw Error(ErrorCode::bad_checkpoint, file.string() + " is not a JSON object");
  }
  ChatSpecialTokens tokens = is_gguf ? gguf.tokens
                                     : ChatSpecialTokens{token_text(config, "bos_token"), token_text(config, "eos_token"),
                                                         token_text(config, "unk_token"), token_text(config, "pad_token")};
  const auto build = [](const std::string& where, std::string_view source, ChatSpecialTokens t, std::string_view tool_use) {
    try {
      return ChatTemplate::from_jinja(source, std::move(t), where, tool_use);
    } catch (const Error& e) {
      throw Error(e.code(), where + ": " + e.what());
    }
  };
  if (!configured.empty()) {
    const std::filesystem::path path(configured);
    if (!std::filesystem::is_regular_file(path)) {
      throw Error(ErrorCode::invalid_config, "model.chat_template: '" + std::string(configured) +
                                                 "' is neither a built-in template (llama-2, chatml) nor a file");
    }
    return build(path.string(), read_file(path), std::move(tokens), {});
  }
  if (is_gguf) {
    if (gguf.source.empty())
      throw Error(ErrorCode::unsupported, "no chat template: " + file.string() + " has no tokenizer.chat_template" + hint);
    return build(file.string(), gguf.source, std::move(tokens), gguf.tool_use);
  }
  if (!has_config) throw Error(ErrorCode::unsupported, "no chat template: " + file.string() + " cannot be read" + hint);
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) {
    throw Error(ErrorCode::unsupported, "no chat template: " + file.string() + " has no chat_template" + hint);
  }
  std::string source;
  std::string tool_use;
  if (it->is_string()) {
    source = it->get<std::string>();
  } else if (it->is_array()) {
    // Newer files list named templates: "default" for chat, "tool_use" for requests with tools.
    for (const auto& entry : *it) {
      if (!entry.is_object() || !entry.contains("template") || !entry["template"].is_string()) continue;
      const std::string name = entry.value("name", "");
      if (name == "default") source = entry["template"].get<std::string>();
      if (name == "tool_use") tool_use = entry["template"].get<std::string>();
    }
    if (source.empty()) std::swap(source, tool_use);  // only a tool_use template: it serves every request
  }
  if (source.empty()) {
    throw Error(ErrorCode::unsupported, "no chat template: " + file.string() + " chat_template is not a template" + hint);
  }
  return build(file.string(), source, std::move(tokens), tool_use);
}

}  // namespace llmk
