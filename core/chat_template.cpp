#include "core/chat_template.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
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
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      throw Error(ErrorCode::invalid_argument, "chat: message " + std::to_string(i) + " has role '" + role +
                                                   "' (expected system, user or assistant)");
    }
  }
}

}  // namespace

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

std::string_view ChatTemplate::name() const { return kind_ == Kind::llama2 ? "llama-2" : "chatml"; }

std::vector<ChatTemplate::Segment> ChatTemplate::segments(std::span<const ChatMessage> messages) const {
  check_messages(messages);
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
  if (!configured.empty()) return ChatTemplate::by_name(configured);
  const auto file = model_dir / "tokenizer_config.json";
  const std::string hint = "; set model.chat_template to llama-2 or chatml";
  std::ifstream in(file);
  if (!in) throw Error(ErrorCode::unsupported, "no chat template: " + file.string() + " cannot be read" + hint);
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::bad_checkpoint, file.string() + " is not valid JSON: " + e.what());
  }
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) {
    throw Error(ErrorCode::unsupported, "no chat template: " + file.string() + " has no chat_template" + hint);
  }
  std::string jinja;
  if (it->is_string()) {
    jinja = it->get<std::string>();
  } else if (it->is_array()) {
    // Newer files list named templates; the one named "default" is the chat one.
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == "default") jinja = entry.value("template", "");
    }
  }
  if (jinja.empty()) {
    throw Error(ErrorCode::unsupported, "no chat template: " + file.string() + " chat_template is not a template" + hint);
  }
  try {
    return ChatTemplate::detect(jinja);
  } catch (const Error& e) {
    throw Error(ErrorCode::unsupported, file.string() + ": " + e.what());
  }
}

}  // namespace llmk
