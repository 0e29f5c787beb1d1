#include "core/config.hpp"

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <variant>

#include "core/config_checks.hpp"
#include "core/device.hpp"
#include "core/error.hpp"

namespace llmk {

namespace config_detail {

// What kv_cache.dtype accepts; which of the types the attention plugin
// serves is its own answer, given with a reason at start-up.
const char* const kKvDtypeNames = "auto, f32, f16, bf16, i8";

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw Error(ErrorCode::invalid_config, where + ": " + what);
}

void check_json_object(const std::string& text, const std::string& where) {
  try {
    if (nlohmann::json::parse(text).is_object()) return;
  } catch (const nlohmann::json::parse_error&) {
  }
  fail(where, "expected a JSON object such as {\"key\": 1}, got '" + text + "'");
}

void require_one_of(const std::string& key, const std::string& value, const std::vector<std::string>& allowed) {
  for (const auto& a : allowed)
    if (value == a) return;
  std::vector<std::string> shown;
  for (const auto& a : allowed) shown.push_back(a.empty() ? "\"\"" : a);
  fail(key, "'" + value + "' is not allowed (allowed: " + join(shown) + ")");
}

void require_range(const std::string& key, double value, double lo, double hi, const std::string& allowed) {
  if (!(value >= lo && value <= hi)) {
    std::ostringstream v;
    v << value;
    fail(key, v.str() + " is out of range (allowed: " + allowed + ")");
  }
}

}  // namespace config_detail

namespace {

using namespace config_detail;

// What kv_cache.dtype accepts; which of the types the attention plugin
// serves is its own answer (attention.cpu: f32, f16, i8; attention.cuda: f32,
// f16, bf16, i8), given with a reason at start-up.

using FieldRef = std::variant<uint32_t*, int32_t*, uint64_t*, double*, bool*, std::string*, std::optional<DType>*,
                              std::vector<std::string>*>;

// One configuration key: where it lives in EngineConfig and how it is read.
struct Field {
  std::string section;
  std::string key;
  std::function<FieldRef(EngineConfig&)> ref;
  bool json_object = false;  // a string holding a JSON object
  std::string dotted() const { return section + "." + key; }
};

#define LLMK_FIELD(sec, name) Field{#sec, #name, [](EngineConfig& c) -> FieldRef { return &c.sec.name; }}
#define LLMK_JSON_FIELD(sec, name) Field{#sec, #name, [](EngineConfig& c) -> FieldRef { return &c.sec.name; }, true}

const std::vector<Field>& fields() {
  static const std::vector<Field> all = {
      LLMK_FIELD(model, path),
      LLMK_FIELD(model, load_format),
      LLMK_FIELD(model, preset),
      LLMK_FIELD(model, tokenizer),
      LLMK_FIELD(model, seed),
      LLMK_FIELD(model, chat_template),
      LLMK_FIELD(executor, device),
      LLMK_FIELD(executor, num_threads),
      LLMK_FIELD(executor, cuda_graphs),
      LLMK_FIELD(plugins, attention),
      LLMK_FIELD(plugins, linear),
      LLMK_FIELD(plugins, linear_blocks),
      LLMK_FIELD(plugins, kv_allocator),
      LLMK_JSON_FIELD(plugins, linear_options),
      LLMK_JSON_FIELD(plugins, attention_options),
      LLMK_JSON_FIELD(plugins, kv_allocator_options),
      LLMK_FIELD(plugins, search_path),
      LLMK_FIELD(kv_cache, capacity_bytes),
      LLMK_FIELD(kv_cache, capacity_fraction),
      LLMK_FIELD(kv_cache, capacity_tokens),
      LLMK_FIELD(kv_cache, block_size),
      LLMK_FIELD(kv_cache, dtype),
      LLMK_FIELD(kv_cache, group_size),
      LLMK_FIELD(kv_cache, rotate_keys),
      LLMK_FIELD(kv_cache, enable_prefix_caching),
      LLMK_FIELD(kv_cache, max_seq_len),
      LLMK_FIELD(kv_cache, prefault),
      LLMK_FIELD(kv_cache, sink_tokens),
      LLMK_FIELD(kv_cache, window),
      LLMK_FIELD(scheduler, policy),
      LLMK_FIELD(scheduler, max_num_seqs),
      LLMK_FIELD(scheduler, max_num_batched_tokens),
      LLMK_FIELD(scheduler, preemption),
      LLMK_FIELD(scheduler, max_queue),
      LLMK_FIELD(scheduler, overlap),
      LLMK_FIELD(server, http),
      LLMK_FIELD(server, zmq),
      LLMK_FIELD(server, zmq_broker),
      LLMK_FIELD(server, max_body_bytes),
      LLMK_FIELD(server, drain_timeout_s),
      LLMK_FIELD(server, served_model_name),
      LLMK_FIELD(server, replica_name),
      LLMK_JSON_FIELD(server, auth),
      LLMK_FIELD(server, request_timeout_s),
      LLMK_FIELD(server, io_timeout_s),
      LLMK_FIELD(server, poll_keep_s),
      LLMK_FIELD(server, poll_max_finished),
      LLMK_FIELD(server, poll_max_wait_s),
      LLMK_JSON_FIELD(server, tls),
      LLMK_FIELD(parallel, tensor),
      LLMK_FIELD(parallel, pipeline),
      LLMK_FIELD(parallel, comm),
      LLMK_JSON_FIELD(parallel, comm_options),
      LLMK_FIELD(parallel, timeout_s),
      LLMK_FIELD(parallel, steps_in_flight),
      LLMK_FIELD(kv_events, endpoint),
      LLMK_FIELD(kv_events, replay_endpoint),
      LLMK_FIELD(kv_events, topic),
      LLMK_FIELD(kv_events, buffer_steps),
      LLMK_FIELD(kv_events, max_queue_events),
      LLMK_FIELD(disaggregation, mode),
      LLMK_FIELD(disaggregation, bootstrap_port),
      LLMK_FIELD(disaggregation, timeout_s),
      LLMK_FIELD(disaggregation, max_pending),
      LLMK_FIELD(speculative, method), LLMK_FIELD(speculative, num_tokens),
      LLMK_FIELD(speculative, prompt_lookup_min), LLMK_FIELD(speculative, prompt_lookup_max),
      LLMK_FIELD(speculative, draft_model), LLMK_FIELD(speculative, draft_linear),
      LLMK_FIELD(speculative, max_batch_size), LLMK_FIELD(speculative, tree_width),
      LLMK_FIELD(speculative, tree_nodes), LLMK_FIELD(speculative, draft_sampling),
      LLMK_FIELD(speculative, proposer), LLMK_JSON_FIELD(speculative, proposer_options),
      LLMK_FIELD(speculative, medusa_heads), LLMK_FIELD(speculative, medusa_top_k),
      LLMK_FIELD(speculative, medusa_choices),
  };
  return all;
}

#undef LLMK_FIELD
#undef LLMK_JSON_FIELD

std::vector<std::string> section_names() {
  std::vector<std::string> names;
  for (const Field& f : fields())
    if (names.empty() || names.back() != f.section) names.push_back(f.section);
  return names;
}



const Field& find_field(const std::string& section, const std::string& key, const std::string& source) {
  bool section_known = false;
  std::vector<std::string> valid;
  for (const Field& f : fields()) {
    if (f.section != section) continue;
    section_known = true;
    if (f.key == key) return f;
    valid.push_back(f.key);
  }
  if (!section_known)
    fail(source, "unknown section '" + section + "' in '" + section + "." + key + "' (valid sections: " +
                     join(section_names()) + ")");
  fail(source, "unknown key '" + section + "." + key + "' (valid keys of " + section + ": " + join(valid) + ")");
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// A plain integer with an optional binary size suffix (KiB, MiB, GiB, TiB).
template <typename T>
T parse_integer(const std::string& text, const std::string& where, bool allow_size_suffix) {
  std::string digits = trim(text);
  uint64_t multiplier = 1;
  if (allow_size_suffix) {
    static const std::pair<const char*, uint64_t> kSuffixes[] = {
        {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}, {"TiB", 1ull << 40}};
    for (const auto& [suffix, m] : kSuffixes) {
      const std::string sfx = suffix;
      if (digits.size() > sfx.size() && digits.compare(digits.size() - sfx.size(), sfx.size(), sfx) == 0) {
        digits = trim(digits.substr(0, digits.size() - sfx.size()));
        multiplier = m;
      }
    }
  }
  if (!digits.empty() && digits[0] == '+') digits.erase(0, 1);
  constexpr bool is_unsigned = std::is_unsigned_v<T>;
  const std::string kind = is_unsigned ? "a non-negative integer" : "an integer";
  const auto bad = [&] {
    fail(where, "expected " + kind + (allow_size_suffix ? " (optionally with KiB/MiB/GiB/TiB)" : "") + ", got '" +
                    text + "'");
  };
  const auto out_of_range = [&] {
    fail(where, "expected " + kind + " in [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
                    std::to_string(std::numeric_limits<T>::max()) + "], got '" + text + "'");
  };
  // Unsigned values parse as uint64 (a '-' is refused), signed ones as int64.
  using Wide = std::conditional_t<is_unsigned, uint64_t, int64_t>;
  Wide value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec == std::errc::result_out_of_range) out_of_range();
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) bad();
  const Wide wide_multiplier = static_cast<Wide>(multiplier);
  if (value > std::numeric_limits<Wide>::max() / wide_multiplier || value < std::numeric_limits<Wide>::min() / wide_multiplier)
    out_of_range();
  value *= wide_multiplier;
  if (value < static_cast<Wide>(std::numeric_limits<T>::min()) || value > static_cast<Wide>(std::numeric_limits<T>::max()))
    out_of_range();
  return static_cast<T>(value);
}

double parse_double(const std::string& text, const std::string& where) {
  const std::string t = trim(text);
  double value = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size() || !std::isfinite(value))
    fail(where, "expected a number, got '" + text + "'");
  return value;
}

bool parse_bool(const std::string& text, const std::string& where) {
  std::string t = trim(text);
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "true" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "no" || t == "off") return false;
  fail(where, "expected true or false, got '" + text + "'");
}

// A YAML node as JSON (for *_options written as YAML mappings).
nlohmann::json yaml_to_json(const YAML::Node& node) {
  if (node.IsMap()) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& kv : node) j[kv.first.as<std::string>()] = yaml_to_json(kv.second);
    return j;
  }
  if (node.IsSequence()) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& e : node) j.push_back(yaml_to_json(e));
    return j;
  }
  if (!node.IsScalar()) return nullptr;
  const std::string s = node.Scalar();
  if (node.Tag() == "!") return s;  // quoted: a string whatever it looks like
  try {
    nlohmann::json j = nlohmann::json::parse(s);  // numbers, true/false, null
    if (j.is_primitive()) return j;
  } catch (const nlohmann::json::parse_error&) {
  }
  return s;
}


std::string scalar_of(const YAML::Node& node, const std::string& where, const char* expected) {
  if (node.IsNull()) fail(where, std::string("expected ") + expected + ", got nothing");
  if (!node.IsScalar()) fail(where, std::string("expected ") + expected + ", got a list or mapping");
  return node.Scalar();
}

void assign(EngineConfig& cfg, const Field& field, const YAML::Node& node, const std::string& source) {
  const std::string where = source + ": " + field.dotted();
  const bool bytes = field.key.size() > 6 && field.key.compare(field.key.size() - 6, 6, "_bytes") == 0;
  std::visit(
      [&](auto* target) {
        using T = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (field.json_object && node.IsSequence())
            fail(where, "expected a JSON object such as {\"key\": 1}, got a list");
          if (field.json_object && node.IsMap()) {
            *target = yaml_to_json(node).dump();
          } else {
            *target = node.IsNull() ? std::string() : scalar_of(node, where, "a string");
          }
          if (field.json_object) check_json_object(*target, where);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          target->clear();
          if (node.IsNull()) return;
          if (node.IsSequence()) {
            for (const auto& e : node) target->push_back(scalar_of(e, where, "a list of strings"));
          } else {  // "a,b,c"
            std::stringstream items(scalar_of(node, where, "a list of strings"));
            for (std::string item; std::getline(items, item, ',');)
              if (!trim(item).empty()) target->push_back(trim(item));
          }
        } else if constexpr (std::is_same_v<T, bool>) {
          *target = parse_bool(scalar_of(node, where, "true or false"), where);
        } else if constexpr (std::is_same_v<T, double>) {
          *target = parse_double(scalar_of(node, where, "a number"), where);
        } else if constexpr (std::is_same_v<T, std::optional<DType>>) {  // "auto": nullopt
          const std::string text = trim(scalar_of(node, where, "a dtype name"));
          DType parsed;
          if (text == "auto") {
            target->reset();
          } else if (parse_dtype(text, parsed)) {
            *target = parsed;
          } else {
            fail(where, "unknown dtype '" + text + "' (allowed: " + kKvDtypeNames + ")");
          }
        } else {
          *target = parse_integer<T>(scalar_of(node, where, "an integer"), where, bytes);
        }
      },
      field.ref(cfg));
}

// Writes a value as YAML that assign() reads back exactly.
std::string yaml_value(const FieldRef& ref) {
  return std::visit(
      [](auto* v) -> std::string {
        using T = std::remove_pointer_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return nlohmann::json(*v).dump();  // JSON strings are valid YAML double-quoted scalars
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          std::string s = "[";
          for (size_t i = 0; i < v->size(); ++i) s += (i ? ", " : "") + nlohmann::json((*v)[i]).dump();
          return s + "]";
        } else if constexpr (std::is_same_v<T, bool>) {
          return *v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::optional<DType>>) {
          return *v ? dtype_name(**v) : "auto";
        } else {
          char buf[64];
          const auto r = std::to_chars(buf, buf + sizeof(buf), *v);  // shortest round-trip form
          return std::string(buf, r.ptr);
        }
      },
      ref);
}



}  // namespace

std::vector<std::string> config_keys() {
  std::vector<std::string> keys;
  for (const Field& f : fields()) keys.push_back(f.dotted());
  return keys;
}

void apply_yaml(EngineConfig& cfg, const std::string& yaml_text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    fail(source, std::string("not valid YAML: ") + e.what());
  }
  if (!root || root.IsNull()) return;
  if (!root.IsMap()) fail(source, "the top level must be a mapping of sections (" + join(section_names()) + ")");
  for (const auto& section : root) {
    const std::string name = section.first.as<std::string>();
    const auto sections = section_names();
    if (std::find(sections.begin(), sections.end(), name) == sections.end())
      fail(source, "unknown section '" + name + "' (valid sections: " + join(sections) + ")");
    if (section.second.IsNull()) continue;
    if (!section.second.IsMap()) fail(source, name + ": expected a mapping of keys");
    for (const auto& kv : section.second) {
      const Field& field = find_field(name, kv.first.as<std::string>(), source);
      assign(cfg, field, kv.second, source);
    }
  }
}

void apply_yaml_file(EngineConfig& cfg, const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw Error(ErrorCode::not_found, file.string() + ": config file cannot be opened");
  std::ostringstream text;
  text << in.rdbuf();
  apply_yaml(cfg, text.str(), file.string());
}

void apply_override(EngineConfig& cfg, const std::string& key_equals_value) {
  const std::string source = "--set " + key_equals_value;
  const auto eq = key_equals_value.find('=');
  if (eq == std::string::npos) fail(source, "expected KEY=VALUE, e.g. scheduler.max_num_seqs=32");
  const std::string key = trim(key_equals_value.substr(0, eq));
  const std::string value = trim(key_equals_value.substr(eq + 1));
  const auto dot = key.find('.');
  if (dot == std::string::npos)
    fail(source, "'" + key + "' is not a dotted key such as scheduler.max_num_seqs (sections: " +
                     join(section_names()) + ")");
  const Field& field = find_field(key.substr(0, dot), key.substr(dot + 1), source);
  YAML::Node node;
  if (!value.empty() && (value.front() == '[' || value.front() == '{')) {  // YAML flow list or mapping
    try {
      node = YAML::Load(value);
    } catch (const YAML::Exception& e) {
      fail(source, std::string("not a valid YAML flow value: ") + e.what());
    }
  } else {
    node = YAML::Node(value);  // taken literally: no YAML comments or quoting rules
  }
  assign(cfg, field, node, source);
}

EngineConfig load_config(const std::filesystem::path& file, const std::vector<std::string>& overrides) {
  EngineConfig cfg;
  if (!file.empty()) apply_yaml_file(cfg, file);
  for (const auto& o : overrides) apply_override(cfg, o);
  validate(cfg);
  return cfg;
}

std::string to_yaml(const EngineConfig& cfg) {
  EngineConfig copy = cfg;  // fields() hands out mutable references
  std::string out, section;
  for (const Field& f : fields()) {
    if (f.section != section) {
      section = f.section;
      out += section + ":\n";
    }
    out += "  " + f.key + ": " + yaml_value(f.ref(copy)) + "\n";
  }
  return out;
}

}  // namespace llmk
