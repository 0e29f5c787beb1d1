#include "core/tokenizer_json_spec.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "core/tokenizer.hpp"

namespace llmk::detail {

namespace {

using json = nlohmann::json;

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string shorten(const json& value) {
  std::string s = value.is_string() ? value.get<std::string>() : value.dump();
  if (s.size() > 120) s = s.substr(0, 117) + "...";
  return s;
}

// Reads one file's JSON and reports errors as "<file>: <path>: <what>".
class Reader {
 public:
  explicit Reader(std::filesystem::path file) : file_(std::move(file)) {}

  json parse() const {
    std::ifstream in(file_, std::ios::binary);
    if (!in) throw Error(ErrorCode::bad_checkpoint, file_.string() + ": cannot be read");
    std::ostringstream text;
    text << in.rdbuf();
    try {
      return json::parse(text.str());
    } catch (const json::exception& e) {
      throw Error(ErrorCode::bad_checkpoint, file_.string() + ": not valid JSON: " + e.what());
    }
  }

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw Error(ErrorCode::bad_checkpoint, file_.string() + ": " + (path.empty() ? "/" : path) + ": " + what);
  }
  [[noreturn]] void unsupported(const std::string& path, const json& value, const std::string& supported) const {
    fail(path, "'" + shorten(value) + "' is not supported (supported: " + supported + ")");
  }

  const json& member(const json& object, const std::string& path, const char* key) const {
    if (!object.is_object()) fail(path, "expected an object, found " + shorten(object));
    auto it = object.find(key);
    if (it == object.end()) fail(path + "/" + key, "missing");
    return *it;
  }
  std::string string_at(const json& object, const std::string& path, const char* key) const {
    const json& v = member(object, path, key);
    if (!v.is_string()) fail(path + "/" + key, "expected a string, found " + shorten(v));
    return v.get<std::string>();
  }
  bool bool_at(const json& object, const std::string& path, const char* key, bool fallback) const {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) fail(path + "/" + key, "expected true or false, found " + shorten(*it));
    return it->get<bool>();
  }
  int32_t id_at(const json& value, const std::string& path) const {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > INT32_MAX)
      fail(path, "expected a token id, found " + shorten(value));
    return static_cast<int32_t>(value.get<int64_t>());
  }

 private:
  std::filesystem::path file_;
};

std::shared_ptr<UnicodeRegex> compile(const Reader& r, const std::string& path, const std::string& pattern) {
  try {
    return std::make_shared<UnicodeRegex>(pattern);
  } catch (const Error& e) {
    r.fail(path, e.what());
  }
}

// Metaspace's "replacement": one character.
std::string read_replacement(const Reader& r, const json& n, const std::string& p) {
  const std::string c = r.string_at(n, p, "replacement");
  const int length = utf8_char_length(c);
  if (c.empty() || length <= 0 || static_cast<size_t>(length) != c.size())
    r.fail(p + "/replacement", "expected one character, found '" + c + "'");
  return c;
}

// Metaspace's "prepend_scheme", or in older files its "add_prefix_space"
// (true: always, false: never).
PrependScheme read_prepend_scheme(const Reader& r, const json& n, const std::string& p) {
  auto it = n.find("prepend_scheme");
  if (it == n.end() || it->is_null()) return r.bool_at(n, p, "add_prefix_space", true) ? PrependScheme::always
                                                                                        : PrependScheme::never;
  if (*it == "always") return PrependScheme::always;
  if (*it == "first") return PrependScheme::first;
  if (*it == "never") return PrependScheme::never;
  r.unsupported(p + "/prepend_scheme", *it, "always, first, never");
}

void read_model(const Reader& r, const json& model, TokenizerJsonSpec& spec) {
  const std::string p = "/model";
  if (!model.is_object()) r.fail(p, "expected an object");
  // Files written before "type" existed are BPE when they have merges.
  if (model.contains("type") || !model.contains("merges")) {
    const json& type = r.member(model, p, "type");
    if (type != "BPE") r.unsupported(p + "/type", type, "BPE");
  }
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"] != 0.0)
    r.unsupported(p + "/dropout", model["dropout"], "null");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && model[key] != "")
      r.unsupported(p + "/" + key, model[key], "null");
  }
  const json& vocab = r.member(model, p, "vocab");
  if (!vocab.is_object()) r.fail(p + "/vocab", "expected an object of token -> id");
  spec.vocab.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) spec.vocab.emplace(token, r.id_at(id, p + "/vocab/" + token));
  const json& merges = r.member(model, p, "merges");
  if (!merges.is_array()) r.fail(p + "/merges", "expected an array");
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    const std::string mp = p + "/merges/" + std::to_string(i);
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        r.fail(mp, "'" + s + "' is not two tokens separated by one space");
      spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      r.fail(mp, "expected \"a b\" or [\"a\", \"b\"], found " + shorten(m));
    }
  }
  if (model.contains("unk_token") && !model["unk_token"].is_null()) spec.bpe.unk_token = r.string_at(model, p, "unk_token");
  spec.bpe.fuse_unk = r.bool_at(model, p, "fuse_unk", false);
  spec.bpe.byte_fallback = r.bool_at(model, p, "byte_fallback", false);
  spec.bpe.ignore_merges = r.bool_at(model, p, "ignore_merges", false);
}

void read_added_tokens(const Reader& r, const json& root, TokenizerJsonSpec& spec) {
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return;
  if (!it->is_array()) r.fail("/added_tokens", "expected an array");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string p = "/added_tokens/" + std::to_string(i);
    AddedTokenSpec a;
    a.id = r.id_at(r.member(t, p, "id"), p + "/id");
    a.content = r.string_at(t, p, "content");
    if (a.content.empty()) r.fail(p + "/content", "empty");
    a.special = r.bool_at(t, p, "special", false);
    a.lstrip = r.bool_at(t, p, "lstrip", false);
    a.rstrip = r.bool_at(t, p, "rstrip", false);
    a.single_word = r.bool_at(t, p, "single_word", false);
    a.normalized = r.bool_at(t, p, "normalized", !a.special);
    spec.added_tokens.push_back(std::move(a));
  }
}

// A Replace/Split "pattern": {"String": s} or {"Regex": r}.
void read_pattern(const Reader& r, const json& owner, const std::string& p, std::string& literal,
                  std::shared_ptr<UnicodeRegex>& regex) {
  const json& pattern = r.member(owner, p, "pattern");
  if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
    literal = pattern["String"].get<std::string>();
    if (literal.empty()) r.fail(p + "/pattern/String", "empty");
  } else if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
    regex = compile(r, p + "/pattern/Regex", pattern["Regex"].get<std::string>());
  } else {
    r.unsupported(p + "/pattern", pattern, "{\"String\": ...} or {\"Regex\": ...}");
  }
}

void read_normalizer(const Reader& r, const json& n, const std::string& p, TokenizerJsonSpec& spec) {
  if (n.is_null()) return;
  const std::string type = r.string_at(n, p, "type");
  if (type == "Sequence") {
    const json& list = r.member(n, p, "normalizers");
    if (!list.is_array()) r.fail(p + "/normalizers", "expected an array");
    for (size_t i = 0; i < list.size(); ++i) read_normalizer(r, list[i], p + "/normalizers/" + std::to_string(i), spec);
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    if (!have_unicode_normalization()) r.fail(p + "/type", "'" + type + "' needs ICU, which this build lacks");
    NormalizerStep s;
    s.kind = NormalizerStep::Kind::unicode;
    s.form = type == "NFC" ? NormalForm::nfc : type == "NFD" ? NormalForm::nfd : type == "NFKC" ? NormalForm::nfkc
                                                                                                 : NormalForm::nfkd;
    spec.normalizer.push_back(std::move(s));
  } else if (type == "Prepend") {
    NormalizerStep s;
    s.kind = NormalizerStep::Kind::prepend;
    s.text = r.string_at(n, p, "prepend");
    spec.normalizer.push_back(std::move(s));
  } else if (type == "Replace") {
    NormalizerStep s;
    s.kind = NormalizerStep::Kind::replace;
    read_pattern(r, n, p, s.text, s.regex);
    s.content = r.string_at(n, p, "content");
    spec.normalizer.push_back(std::move(s));
  } else {
    r.unsupported(p + "/type", type, "NFC, NFD, NFKC, NFKD, Prepend, Replace, Sequence");
  }
}

void read_pre_tokenizer(const Reader& r, const json& n, const std::string& p, TokenizerJsonSpec& spec) {
  if (n.is_null()) return;
  const std::string type = r.string_at(n, p, "type");
  if (type == "Sequence") {
    const json& list = r.member(n, p, "pretokenizers");
    if (!list.is_array()) r.fail(p + "/pretokenizers", "expected an array");
    for (size_t i = 0; i < list.size(); ++i)
      read_pre_tokenizer(r, list[i], p + "/pretokenizers/" + std::to_string(i), spec);
  } else if (type == "Split") {
    PreTokenizerStep s;
    s.kind = PreTokenizerStep::Kind::split;
    read_pattern(r, n, p, s.literal, s.regex);
    const json& behavior = r.member(n, p, "behavior");
    if (behavior != "Isolated") r.unsupported(p + "/behavior", behavior, "Isolated");
    if (r.bool_at(n, p, "invert", false)) r.unsupported(p + "/invert", true, "false");
    spec.pre_tokenizer.push_back(std::move(s));
  } else if (type == "ByteLevel") {
    if (r.bool_at(n, p, "add_prefix_space", false)) r.unsupported(p + "/add_prefix_space", true, "false");
    PreTokenizerStep s;
    s.kind = PreTokenizerStep::Kind::byte_level;
    if (r.bool_at(n, p, "use_regex", true)) s.regex = compile(r, p, kGpt2Pattern);
    spec.pre_tokenizer.push_back(std::move(s));
  } else if (type == "Digits") {
    // Numeric characters (Rust's char::is_numeric, \p{N}) split off one by
    // one or as runs, each run a piece of its own.
    PreTokenizerStep s;
    s.kind = PreTokenizerStep::Kind::split;
    s.regex = compile(r, p, r.bool_at(n, p, "individual_digits", false) ? "\\p{N}" : "\\p{N}+");
    spec.pre_tokenizer.push_back(std::move(s));
  } else if (type == "Metaspace") {
    PreTokenizerStep s;
    s.kind = PreTokenizerStep::Kind::metaspace;
    s.literal = read_replacement(r, n, p);
    s.prepend = read_prepend_scheme(r, n, p);
    s.split = r.bool_at(n, p, "split", true);
    spec.pre_tokenizer.push_back(std::move(s));
  } else {
    r.unsupported(p + "/type", type, "Split, ByteLevel, Metaspace, Digits, Sequence");
  }
}

int32_t token_id(const TokenizerJsonSpec& spec, const std::string& content) {
  for (const auto& a : spec.added_tokens)
    if (a.content == content) return a.id;
  auto it = spec.vocab.find(content);
  return it == spec.vocab.end() ? -1 : it->second;
}

void read_post_processor(const Reader& r, const json& n, const std::string& p, TokenizerJsonSpec& spec) {
  if (n.is_null()) return;
  const std::string type = r.string_at(n, p, "type");
  if (type == "Sequence") {
    const json& list = r.member(n, p, "processors");
    if (!list.is_array()) r.fail(p + "/processors", "expected an array");
    for (size_t i = 0; i < list.size(); ++i)
      read_post_processor(r, list[i], p + "/processors/" + std::to_string(i), spec);
  } else if (type == "ByteLevel") {
    // Adjusts offsets only; the ids stay as they are.
  } else if (type == "TemplateProcessing") {
    const json& single = r.member(n, p, "single");
    const json& specials = r.member(n, p, "special_tokens");
    if (!single.is_array()) r.fail(p + "/single", "expected an array");
    bool seen_a = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const std::string ip = p + "/single/" + std::to_string(i);
      const json& item = single[i];
      if (item.is_object() && item.contains("Sequence")) {
        if (r.string_at(item["Sequence"], ip + "/Sequence", "id") != "A" || seen_a)
          r.unsupported(ip, item, "one {\"Sequence\": {\"id\": \"A\"}}");
        seen_a = true;
      } else if (item.is_object() && item.contains("SpecialToken")) {
        const std::string name = r.string_at(item["SpecialToken"], ip + "/SpecialToken", "id");
        const json& entry = r.member(specials, p + "/special_tokens", name.c_str());
        const json& ids = r.member(entry, p + "/special_tokens/" + name, "ids");
        if (!ids.is_array()) r.fail(p + "/special_tokens/" + name + "/ids", "expected an array");
        for (const json& id : ids) (seen_a ? spec.template_suffix : spec.template_prefix).push_back(r.id_at(id, ip));
      } else {
        r.unsupported(ip, item, "SpecialToken, Sequence");
      }
    }
    if (!seen_a) r.fail(p + "/single", "no $A in the template");
  } else {
    r.unsupported(p + "/type", type, "TemplateProcessing, ByteLevel, Sequence");
  }
}

DecoderStep read_metaspace_decoder(const Reader& r, const json& n, const std::string& p) {
  DecoderStep s;
  s.kind = DecoderStep::Kind::metaspace;
  s.pattern = read_replacement(r, n, p);
  s.content = " ";
  s.prepend = read_prepend_scheme(r, n, p);
  return s;
}

void read_decoder(const Reader& r, const json& n, TokenizerJsonSpec& spec) {
  const std::string p = "/decoder";
  const char* supported = "ByteLevel, Metaspace, or a Sequence of Replace or Metaspace, ByteFallback, Fuse, Strip";
  if (n.is_null()) r.unsupported(p, n, supported);
  const std::string type = r.string_at(n, p, "type");
  if (type == "ByteLevel") {
    DecoderStep s;
    s.kind = DecoderStep::Kind::byte_level;
    spec.decoder.push_back(s);
    return;
  }
  if (type == "Metaspace") {
    spec.decoder.push_back(read_metaspace_decoder(r, n, p));
    return;
  }
  if (type != "Sequence") r.unsupported(p + "/type", type, supported);
  const json& list = r.member(n, p, "decoders");
  if (!list.is_array()) r.fail(p + "/decoders", "expected an array");
  // Only the order the conversions of sentencepiece models use: the
  // streaming detokenizer relies on it (core/tokenizer.hpp, DecodeRules).
  int last = -1;
  bool drops_first_spaces = false;  // a Metaspace step that drops the first token's replacement characters
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string ip = p + "/decoders/" + std::to_string(i);
    const std::string t = r.string_at(list[i], ip, "type");
    DecoderStep s;
    s.kind = DecoderStep::Kind::fuse;
    int order = 0;
    if (t == "Replace") {
      std::shared_ptr<UnicodeRegex> regex;
      read_pattern(r, list[i], ip, s.pattern, regex);
      s.content = r.string_at(list[i], ip, "content");
      if (regex || s.pattern != "\xE2\x96\x81" || s.content != " ")
        r.unsupported(ip, list[i], "Replace of \"\xE2\x96\x81\" by \" \"");
      s.kind = DecoderStep::Kind::replace;
      order = 0;
    } else if (t == "Metaspace") {
      s = read_metaspace_decoder(r, list[i], ip);
      drops_first_spaces = s.prepend != PrependScheme::never;
      order = 0;
    } else if (t == "ByteFallback") {
      s.kind = DecoderStep::Kind::byte_fallback;
      order = 1;
    } else if (t == "Fuse") {
      s.kind = DecoderStep::Kind::fuse;
      order = 2;
    } else if (t == "Strip") {
      s.kind = DecoderStep::Kind::strip;
      s.content = r.string_at(list[i], ip, "content");
      const json& start = r.member(list[i], ip, "start");
      const json& stop = r.member(list[i], ip, "stop");
      if (s.content != " " || start != 1 || stop != 0 || last != 2 || drops_first_spaces)
        r.unsupported(ip, list[i], "Strip(\" \", 1, 0) right after Fuse, without a Metaspace that prepends");
      s.strip_start = 1;
      order = 3;
    } else {
      r.unsupported(ip + "/type", t, "Replace, Metaspace, ByteFallback, Fuse, Strip");
    }
    if (order <= last)
      r.fail(ip, "'" + t + "' out of order (expected Replace or Metaspace, ByteFallback, Fuse, Strip)");
    last = order;
    spec.decoder.push_back(std::move(s));
  }
  if (spec.decoder.empty()) r.fail(p + "/decoders", "empty");
}

// bos_token / eos_token of tokenizer_config.json: a string, an object with
// "content", or null. Returns nullopt when the key is absent.
std::optional<int32_t> config_token(const Reader& r, const json& config, const char* key,
                                    const TokenizerJsonSpec& spec) {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_null()) return -1;
  std::string content;
  if (it->is_string()) content = it->get<std::string>();
  else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) content = (*it)["content"];
  else r.fail(std::string("/") + key, "expected a token's text, found " + shorten(*it));
  const int32_t id = token_id(spec, content);
  if (id < 0) r.fail(std::string("/") + key, "'" + content + "' is not a token of the tokenizer");
  return id;
}

void read_special_ids(const std::filesystem::path& json_file, TokenizerJsonSpec& spec) {
  const auto dir = json_file.parent_path();
  const auto tokenizer_config = dir / "tokenizer_config.json";
  if (std::filesystem::exists(tokenizer_config)) {
    Reader r(tokenizer_config);
    const json config = r.parse();
    if (config.is_object()) {
      spec.bos_id = config_token(r, config, "bos_token", spec);
      spec.eos_id = config_token(r, config, "eos_token", spec);
    }
  }
  const auto model_config = dir / "config.json";
  if ((!spec.bos_id || !spec.eos_id) && std::filesystem::exists(model_config)) {
    Reader r(model_config);
    const json config = r.parse();
    auto id_of = [&](const char* key) -> std::optional<int32_t> {
      if (!config.is_object() || !config.contains(key)) return std::nullopt;
      const json& v = config[key];
      if (v.is_array() && !v.empty()) return r.id_at(v[0], std::string("/") + key + "/0");
      if (v.is_null()) return -1;
      return r.id_at(v, std::string("/") + key);
    };
    if (!spec.bos_id) spec.bos_id = id_of("bos_token_id");
    if (!spec.eos_id) spec.eos_id = id_of("eos_token_id");
  }
}

// The ids of a tokenizer.json number its tokens from 0, with at most a few
// holes: the engine keeps a table row per id up to the largest, so an id far
// past the tokens named (a corrupt or hostile file) is refused here rather
// than sized into gigabytes. Up to half the id space may be unnamed, plus
// 1024 ids of room for small files with reserved ranges.
void check_id_space(const Reader& r, const TokenizerJsonSpec& spec) {
  int64_t largest = -1;
  std::string where;
  for (const auto& [token, id] : spec.vocab) {
    if (id > largest) largest = id, where = "/model/vocab/" + token;
  }
  for (size_t i = 0; i < spec.added_tokens.size(); ++i) {
    if (spec.added_tokens[i].id > largest)
      largest = spec.added_tokens[i].id, where = "/added_tokens/" + std::to_string(i) + "/id";
  }
  const int64_t named = static_cast<int64_t>(spec.vocab.size() + spec.added_tokens.size());
  if (largest >= 2 * named + 1024)
    r.fail(where, "token id " + std::to_string(largest) + " is far past the " + std::to_string(named) +
                      " tokens the file names (ids number the tokens from 0, with few holes)");
}

}  // namespace

TokenizerJsonSpec read_tokenizer_json(const std::filesystem::path& json_file) {
  Reader r(json_file);
  const json root = r.parse();
  if (!root.is_object()) r.fail("", "expected an object");
  TokenizerJsonSpec spec;
  for (const char* key : {"truncation", "padding"}) {
    if (root.contains(key) && !root[key].is_null()) r.unsupported(std::string("/") + key, root[key], "null");
  }
  read_model(r, r.member(root, "", "model"), spec);
  read_added_tokens(r, root, spec);
  check_id_space(r, spec);
  read_normalizer(r, root.value("normalizer", json()), "/normalizer", spec);
  read_pre_tokenizer(r, root.value("pre_tokenizer", json()), "/pre_tokenizer", spec);
  read_post_processor(r, root.value("post_processor", json()), "/post_processor", spec);
  read_decoder(r, root.value("decoder", json()), spec);
  read_special_ids(json_file, spec);
  return spec;
}

}  // namespace llmk::detail
