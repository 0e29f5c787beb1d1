// Who may use the server: API keys on HTTP, the per-key limits, and the
// ZeroMQ CURVE key files, as configured under server.auth (a mapping, see
// config/default.yaml). A key has a name (what logs and metrics show) and a
// secret (never logged, never in metrics).
//
// Key sources: server.auth.keys_file, one "name:secret" per line ('#'
// starts a comment line), re-read when the file changes (its modification
// time or size), so a key removed from it is refused from the next request
// on; and server.auth.keys_env, the name of an environment variable holding
// "name:secret" entries separated by commas or newlines, or one bare secret
// (named "env"), read once at start-up.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace llmk::ipc {

// A key's limits; 0 = unlimited.
struct KeyLimits {
  uint32_t max_concurrent = 0;      // requests of the key live at once
  uint64_t tokens_per_minute = 0;   // prompt + completion tokens over the last 60 s
};

struct AuthOptions {
  std::string keys_file;
  std::string keys_env;
  std::vector<std::string> open_routes = {"/health"};  // HTTP paths served without a key
  KeyLimits default_limits;                            // limits.default
  std::map<std::string, KeyLimits> limits;             // limits.<key name>
  std::string curve_secret_key_file;    // ZeroMQ: the server's CURVE secret key (Z85); "" = plain
  std::string curve_allowed_keys_file;  // ZeroMQ: client public keys (Z85) admitted, one per line

  bool http_keys() const { return !keys_file.empty() || !keys_env.empty(); }
  const KeyLimits& limits_of(const std::string& key_name) const;
};

// server.auth as JSON (the config keeps the mapping as a JSON object).
// Throws Error(invalid_config) naming the key, e.g. server.auth.limits.alice.
AuthOptions parse_auth_options(const std::string& json_text);

// Equal contents, in a time that depends only on the lengths.
bool constant_time_equal(std::string_view a, std::string_view b);

// The secret a client presents: "Authorization: Bearer SECRET", else
// "x-api-key: SECRET"; "" when neither.
std::string presented_secret(const std::string& authorization, const std::string& x_api_key);

class KeyStore {
 public:
  // Reads both sources; throws Error(invalid_config) naming the file and
  // line (never the secret) when one is malformed or the file is missing.
  KeyStore(std::string keys_file, std::string keys_env);

  // The name of the key whose secret is `secret`, nullopt when none. Every
  // key is compared in full, whichever matches.
  std::optional<std::string> find(std::string_view secret);
  size_t num_keys();

 private:
  struct Key {
    std::string name;
    std::string secret;
  };
  void reload_if_changed();  // the lock held

  std::mutex mutex_;
  std::string keys_file_;
  std::vector<Key> env_keys_;
  std::vector<Key> file_keys_;
  std::filesystem::file_time_type file_time_{};
  uintmax_t file_size_ = 0;
};

// "name:secret" entries separated by `separators`; `source` names them in
// errors. A text without ':' is one secret named `bare_name` when that is set.
std::vector<std::pair<std::string, std::string>> parse_key_entries(const std::string& text, const std::string& source,
                                                                   const std::string& separators,
                                                                   const std::string& bare_name);

}  // namespace llmk::ipc
