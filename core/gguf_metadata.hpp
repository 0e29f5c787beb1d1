// Typed reads of GGUF metadata that throw Error(bad_checkpoint) naming the
// file and key when a value is missing or has the wrong type or range.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/gguf.hpp"

namespace llmk::gguf_meta {

// An integer of any GGUF integer type in [min_value, INT32_MAX]; `fallback`
// when absent (nullopt: required).
int32_t get_int(const GgufFile& f, const std::string& key, std::optional<int32_t> fallback, int64_t min_value = 1);
// A finite number of any numeric type; `fallback` when absent.
double get_number(const GgufFile& f, const std::string& key, std::optional<double> fallback);
bool get_bool(const GgufFile& f, const std::string& key, bool fallback);
std::optional<std::string> get_string(const GgufFile& f, const std::string& key);
// An array of strings; nullopt when absent.
std::optional<std::vector<std::string>> get_string_array(const GgufFile& f, const std::string& key);
// An array of numbers (any numeric element type); nullopt when absent.
std::optional<std::vector<double>> get_number_array(const GgufFile& f, const std::string& key);

[[noreturn]] void fail_key(const GgufFile& f, const std::string& key, const std::string& what);

}  // namespace llmk::gguf_meta
