#include "ipc/auth.hpp"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace llmk::ipc {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& key, const std::string& what) {
  throw Error(ErrorCode::invalid_config, key + ": " + what);
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::string string_of(const json& j, const std::string& key) {
  if (!j.is_string()) fail(key, "expected a string, got " + j.dump());
  return j.get<std::string>();
}

uint64_t count_of(const json& j, const std::string& key) {
  if (!j.is_number_unsigned() && !(j.is_number_integer() && j.get<int64_t>() >= 0))
    fail(key, "expected a non-negative integer (0 = unlimited), got " + j.dump());
  return j.get<uint64_t>();
}

KeyLimits limits_of_json(const json& j, const std::string& key) {
  if (!j.is_object()) fail(key, "expected a mapping {max_concurrent: N, tokens_per_minute: N}, got " + j.dump());
  KeyLimits limits;
  for (const auto& [name, value] : j.items()) {
    if (name == "max_concurrent") {
      const uint64_t n = count_of(value, key + ".max_concurrent");
      if (n > UINT32_MAX) fail(key + ".max_concurrent", "at most " + std::to_string(UINT32_MAX));
      limits.max_concurrent = static_cast<uint32_t>(n);
    } else if (name == "tokens_per_minute") {
      limits.tokens_per_minute = count_of(value, key + ".tokens_per_minute");
    } else {
      fail(key, "unknown key '" + name + "' (valid: max_concurrent, tokens_per_minute)");
    }
  }
  return limits;
}

}  // namespace

const KeyLimits& AuthOptions::limits_of(const std::string& key_name) const {
  const auto it = limits.find(key_name);
  return it == limits.end() ? default_limits : it->second;
}

AuthOptions parse_auth_options(const std::string& json_text) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& e) {
    fail("server.auth", std::string("not a JSON object: ") + e.what());
  }
  if (!root.is_object()) fail("server.auth", "expected a mapping, got " + root.dump());
  AuthOptions o;
  for (const auto& [name, value] : root.items()) {
    const std::string key = "server.auth." + name;
    if (name == "keys_file") {
      o.keys_file = string_of(value, key);
    } else if (name == "keys_env") {
      o.keys_env = string_of(value, key);
    } else if (name == "open_routes") {
      if (!value.is_array()) fail(key, "expected a list of paths such as [/health, /metrics], got " + value.dump());
      o.open_routes.clear();
      for (const auto& route : value) {
        const std::string path = string_of(route, key);
        if (path.empty() || path[0] != '/') fail(key, "'" + path + "' is not a path starting with '/'");
        o.open_routes.push_back(path);
      }
    } else if (name == "limits") {
      if (!value.is_object()) fail(key, "expected a mapping of key names to limits, got " + value.dump());
      for (const auto& [key_name, limits] : value.items()) {
        if (key_name == "default") {
          o.default_limits = limits_of_json(limits, key + ".default");
        } else {
          o.limits[key_name] = limits_of_json(limits, key + "." + key_name);
        }
      }
    } else if (name == "curve_secret_key_file") {
      o.curve_secret_key_file = string_of(value, key);
    } else if (name == "curve_allowed_keys_file") {
      o.curve_allowed_keys_file = string_of(value, key);
    } else {
      fail(key, "unknown key (valid keys of server.auth: keys_file, keys_env, open_routes, limits, "
                "curve_secret_key_file, curve_allowed_keys_file)");
    }
  }
  if (!o.curve_secret_key_file.empty() && o.curve_allowed_keys_file.empty())
    fail("server.auth.curve_allowed_keys_file", "required with curve_secret_key_file (the clients admitted)");
  if (o.curve_secret_key_file.empty() && !o.curve_allowed_keys_file.empty())
    fail("server.auth.curve_secret_key_file", "required with curve_allowed_keys_file (the server's own key)");
  return o;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Runs over the longer length whatever the contents; a length mismatch
  // is folded into the result rather than returned early.
  const size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = static_cast<unsigned char>(diff | (x ^ y));
  }
  return diff == 0;
}

std::string presented_secret(const std::string& authorization, const std::string& x_api_key) {
  const std::string scheme = "Bearer ";
  if (authorization.size() > scheme.size()) {
    bool bearer = true;
    for (size_t i = 0; i < scheme.size(); ++i)
      bearer = bearer && std::tolower(static_cast<unsigned char>(authorization[i])) ==
                             std::tolower(static_cast<unsigned char>(scheme[i]));
    if (bearer) return trim(authorization.substr(scheme.size()));
  }
  return trim(x_api_key);
}

std::vector<std::pair<std::string, std::string>> parse_key_entries(const std::string& text, const std::string& source,
                                                                   const std::string& separators,
                                                                   const std::string& bare_name) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!bare_name.empty() && text.find(':') == std::string::npos && !trim(text).empty()) {
    out.emplace_back(bare_name, trim(text));
    return out;
  }
  size_t begin = 0;
  int entry = 0;
  while (begin <= text.size()) {
    size_t end = text.find_first_of(separators, begin);
    if (end == std::string::npos) end = text.size();
    const std::string item = trim(text.substr(begin, end - begin));
    begin = end + 1;
    ++entry;
    if (item.empty() || item[0] == '#') continue;
    const size_t colon = item.find(':');
    const std::string where = source + " entry " + std::to_string(entry);
    if (colon == std::string::npos) fail(where, "expected name:secret (no ':' found)");
    const std::string name = trim(item.substr(0, colon));
    const std::string secret = trim(item.substr(colon + 1));
    if (name.empty()) fail(where, "the key has no name (expected name:secret)");
    if (secret.empty()) fail(where, "key '" + name + "' has an empty secret");
    for (const char c : name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
        fail(where, "key name '" + name + "' may hold only letters, digits, '-', '_' and '.'");
    for (const auto& [other, unused] : out)
      if (other == name) fail(where, "key name '" + name + "' appears twice");
    out.emplace_back(name, secret);
  }
  return out;
}

KeyStore::KeyStore(std::string keys_file, std::string keys_env) : keys_file_(std::move(keys_file)) {
  if (!keys_env.empty()) {
    const char* value = std::getenv(keys_env.c_str());
    if (value == nullptr || trim(value).empty())
      fail("server.auth.keys_env", "the environment variable " + keys_env + " is not set or empty");
    for (auto& [name, secret] : parse_key_entries(value, "the environment variable " + keys_env, ",\n", "env"))
      env_keys_.push_back({name, secret});
  }
  if (!keys_file_.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(keys_file_, ec))
      fail("server.auth.keys_file", "'" + keys_file_ + "' is not a readable file");
    std::lock_guard lock(mutex_);
    reload_if_changed();
    if (file_keys_.empty() && env_keys_.empty())
      fail("server.auth.keys_file", "'" + keys_file_ + "' holds no key (expected name:secret lines)");
  }
}

void KeyStore::reload_if_changed() {
  if (keys_file_.empty()) return;
  std::error_code ec;
  const auto time = std::filesystem::last_write_time(keys_file_, ec);
  const auto size = ec ? 0 : std::filesystem::file_size(keys_file_, ec);
  if (ec) {  // gone: its keys are revoked
    if (!file_keys_.empty()) spdlog::warn("auth: {} cannot be read ({}): its keys are refused", keys_file_, ec.message());
    file_keys_.clear();
    file_time_ = {};
    file_size_ = 0;
    return;
  }
  if (time == file_time_ && size == file_size_) return;
  std::ifstream in(keys_file_);
  std::ostringstream text;
  text << in.rdbuf();
  try {
    std::vector<Key> keys;
    for (auto& [name, secret] : parse_key_entries(text.str(), keys_file_, "\n", "")) keys.push_back({name, secret});
    file_keys_ = std::move(keys);
    spdlog::info("auth: {} key(s) from {}", file_keys_.size(), keys_file_);
  } catch (const Error& e) {
    if (file_time_ == std::filesystem::file_time_type{}) throw;  // the first read: a config error
    spdlog::error("auth: {}; keeping the previous keys", e.what());
  }
  file_time_ = time;
  file_size_ = size;
}

std::optional<std::string> KeyStore::find(std::string_view secret) {
  std::lock_guard lock(mutex_);
  reload_if_changed();
  std::optional<std::string> found;
  for (const auto* keys : {&env_keys_, &file_keys_})
    for (const Key& k : *keys)
      if (constant_time_equal(k.secret, secret) && !found) found = k.name;
  return found;
}

size_t KeyStore::num_keys() {
  std::lock_guard lock(mutex_);
  reload_if_changed();
  return env_keys_.size() + file_keys_.size();
}

}  // namespace llmk::ipc
