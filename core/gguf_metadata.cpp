#include "core/gguf_metadata.hpp"

#include <cmath>
#include <limits>

#include "core/error.hpp"

namespace llmk::gguf_meta {

void fail_key(const GgufFile& f, const std::string& key, const std::string& what) {
  throw Error(ErrorCode::bad_checkpoint, f.name() + ": metadata key '" + key + "' " + what);
}

namespace {

std::string type_of(const GgufValue& v) {
  std::string s = gguf_value_type_name(v.type);
  if (v.type == GgufValueType::array) s += " of " + std::string(gguf_value_type_name(v.element_type));
  return s;
}

}  // namespace

int32_t get_int(const GgufFile& f, const std::string& key, std::optional<int32_t> fallback, int64_t min_value) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) {
    if (!fallback) fail_key(f, key, "is missing (required)");
    return *fallback;
  }
  if (!v->is_integer()) fail_key(f, key, "is a " + type_of(*v) + ", not an integer");
  if (v->is_huge_u64 || v->integer < min_value || v->integer > std::numeric_limits<int32_t>::max())
    fail_key(f, key,
             "= " + std::string(v->is_huge_u64 ? "(above 2^63)" : std::to_string(v->integer)) +
                 " is out of range (must be >= " + std::to_string(min_value) + " and fit in 32 bits)");
  return static_cast<int32_t>(v->integer);
}

double get_number(const GgufFile& f, const std::string& key, std::optional<double> fallback) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) {
    if (!fallback) fail_key(f, key, "is missing (required)");
    return *fallback;
  }
  if (!v->is_number()) fail_key(f, key, "is a " + type_of(*v) + ", not a number");
  const double x = v->as_double();
  if (!std::isfinite(x)) fail_key(f, key, "is not a finite number");
  return x;
}

bool get_bool(const GgufFile& f, const std::string& key, bool fallback) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return fallback;
  if (v->type != GgufValueType::boolean) fail_key(f, key, "is a " + type_of(*v) + ", not a bool");
  return v->integer != 0;
}

std::optional<std::string> get_string(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != GgufValueType::string) fail_key(f, key, "is a " + type_of(*v) + ", not a string");
  return v->string;
}

std::optional<std::vector<std::string>> get_string_array(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != GgufValueType::array || v->element_type != GgufValueType::string)
    fail_key(f, key, "is a " + type_of(*v) + ", not an array of strings");
  std::vector<std::string> out;
  out.reserve(v->elements.size());
  for (const GgufValue& e : v->elements) out.push_back(e.string);
  return out;
}

std::optional<std::vector<double>> get_number_array(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != GgufValueType::array) fail_key(f, key, "is a " + type_of(*v) + ", not an array of numbers");
  GgufValue probe;
  probe.type = v->element_type;
  if (!probe.is_number()) fail_key(f, key, "is a " + type_of(*v) + ", not an array of numbers");
  std::vector<double> out;
  out.reserve(v->elements.size());
  for (const GgufValue& e : v->elements) out.push_back(e.as_double());
  return out;
}

}  // namespace llmk::gguf_meta
