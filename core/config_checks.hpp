// Checks shared by the configuration reader (core/config.cpp) and its
// validation (core/config_validate.cpp); not part of the public API.
#pragma once

#include <string>
#include <vector>

namespace llmk::config_detail {

extern const char* const kKvDtypeNames;
std::string join(const std::vector<std::string>& items);  // "a, b, c"
// Throws Error(invalid_config) "where: what".
[[noreturn]] void fail(const std::string& where, const std::string& what);
void check_json_object(const std::string& text, const std::string& where);
void require_one_of(const std::string& key, const std::string& value, const std::vector<std::string>& allowed);
void require_range(const std::string& key, double value, double lo, double hi, const std::string& allowed);

}  // namespace llmk::config_detail
