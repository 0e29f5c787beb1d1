// The str side of the Jinja builtins: Python's string operations as
// templates observe them, the methods a string value exposes, and UTF-8
// character splitting (Python's str indexing).
#include <algorithm>

#include "core/jinja/builtins.hpp"
#include "core/jinja/builtins_detail.hpp"
#include "core/jinja/limits.hpp"

namespace llmk::jinja {
namespace detail {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

// str.strip family: `chars` null strips whitespace.
std::string strip_chars(const std::string& s, const Value* chars, bool left, bool right) {
  const auto drop = [&](char c) {
    if (chars == nullptr || chars->is_none()) return is_space(c);
    return need_string(*chars, "strip").find(c) != std::string::npos;
  };
  size_t begin = 0;
  size_t end = s.size();
  if (left) {
    while (begin < end && drop(s[begin])) ++begin;
  }
  if (right) {
    while (end > begin && drop(s[end - 1])) --end;
  }
  return s.substr(begin, end - begin);
}

std::string to_upper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}

std::string to_lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

namespace {

bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

}  // namespace

std::string to_title(const std::string& s) {
  std::string out = s;
  bool prev_letter = false;
  for (char& c : out) {
    if (is_alpha(c)) {
      c = prev_letter ? to_lower(std::string(1, c))[0] : to_upper(std::string(1, c))[0];
      prev_letter = true;
    } else {
      prev_letter = false;
    }
  }
  return out;
}

std::string capitalize(const std::string& s) {
  if (s.empty()) return s;
  return to_upper(s.substr(0, 1)) + to_lower(s.substr(1));
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  if (from.empty()) {  // Python inserts `to` between every character
    const auto chars = utf8_chars(s);
    for (const auto& c : chars) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out += c;
      check_string_size(out.size(), "replace");
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  while (count < 0 || done < count) {
    const size_t at = s.find(from, pos);
    if (at == std::string::npos) break;
    out += s.substr(pos, at - pos) + to;
    check_string_size(out.size(), "replace");
    pos = at + from.size();
    ++done;
  }
  check_string_size(out.size() + (s.size() - pos), "replace");
  return out + s.substr(pos);
}

namespace {

List split(const std::string& s, const Value* sep, int64_t max_split) {
  List out;
  if (sep == nullptr || sep->is_none()) {  // runs of whitespace, no empty pieces
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && is_space(s[i])) ++i;
      if (i >= s.size()) break;
      if (max_split >= 0 && static_cast<int64_t>(out.size()) == max_split) {
        std::string rest = s.substr(i);
        while (!rest.empty() && is_space(rest.back())) rest.pop_back();
        out.emplace_back(rest);
        return out;
      }
      size_t j = i;
      while (j < s.size() && !is_space(s[j])) ++j;
      out.emplace_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  const std::string& separator = need_string(*sep, "split");
  if (separator.empty()) fail("split: empty separator");
  size_t pos = 0;
  while (max_split < 0 || static_cast<int64_t>(out.size()) < max_split) {
    const size_t at = s.find(separator, pos);
    if (at == std::string::npos) break;
    out.emplace_back(s.substr(pos, at - pos));
    pos = at + separator.size();
  }
  out.emplace_back(s.substr(pos));
  return out;
}

bool starts_or_ends(const std::string& s, const Value& affix, bool at_start) {
  const auto one = [&](const Value& a) {
    const std::string& x = need_string(a, at_start ? "startswith" : "endswith");
    if (x.size() > s.size()) return false;
    return at_start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list()) {
    return std::any_of(affix.as_list().begin(), affix.as_list().end(), one);
  }
  return one(affix);
}

}  // namespace

Value string_method(const std::string& s, const std::string& name) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip";
    const bool right = name != "lstrip";
    return method(name, [s, left, right](const Args& a) { return Value(strip_chars(s, a.get(0, "chars"), left, right)); });
  }
  if (name == "split") {
    return method(name, [s](const Args& a) {
      const Value* max = a.get(1, "maxsplit");
      return Value(split(s, a.get(0, "sep"), max ? need_int(*max, "split") : -1));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool at_start = name == "startswith";
    return method(name, [s, at_start, name](const Args& a) {
      const Value* affix = a.get(0, "prefix");
      if (affix == nullptr) fail(name + " needs an argument");
      return Value(starts_or_ends(s, *affix, at_start));
    });
  }
  if (name == "upper") return method(name, [s](const Args&) { return Value(to_upper(s)); });
  if (name == "lower") return method(name, [s](const Args&) { return Value(to_lower(s)); });
  if (name == "title") return method(name, [s](const Args&) { return Value(to_title(s)); });
  if (name == "capitalize") return method(name, [s](const Args&) { return Value(capitalize(s)); });
  if (name == "replace") {
    return method(name, [s](const Args& a) {
      const Value* from = a.get(0, "old");
      const Value* to = a.get(1, "new");
      const Value* count = a.get(2, "count");
      if (from == nullptr || to == nullptr) fail("replace needs two arguments");
      return Value(replace_all(s, need_string(*from, "replace"), need_string(*to, "replace"),
                               count ? need_int(*count, "replace") : -1));
    });
  }
  if (name == "join") {
    return method(name, [s](const Args& a) {
      const Value* items = a.get(0, "iterable");
      if (items == nullptr) fail("join needs an argument");
      std::string out;
      bool first = true;
      for (const Value& v : iterate(*items)) {
        if (!first) out += s;
        first = false;
        out += need_string(v, "str.join");
        check_string_size(out.size(), "str.join");
      }
      return Value(out);
    });
  }
  if (name == "find") {
    return method(name, [s](const Args& a) {
      const Value* x = a.get(0, "sub");
      if (x == nullptr) fail("find needs an argument");
      const size_t at = s.find(need_string(*x, "find"));
      return Value(at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(utf8_chars(s.substr(0, at)).size()));
    });
  }
  return Value();
}

}  // namespace detail

std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace llmk::jinja
