// StopStringMatcher against a reference that searches the whole text.
#include <catch2/catch.hpp>

#include <random>

#include "core/error.hpp"
#include "core/stop_matcher.hpp"
#include "core/tokenizer.hpp"

using llmk::StopStringMatcher;

namespace {

const std::string kLlamaModel = std::string(LLMK_SHARED_DIR) + "/models/llama2-tokenizer/tokenizer.model";

// Reads the text byte by byte and stops at the first byte that completes a
// stop string, truncating before the longest stop string ending there.
std::pair<std::string, bool> reference_truncation(const std::string& text, const std::vector<std::string>& stops) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t longest = 0;
    for (const auto& s : stops) {
      if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0) longest = std::max(longest, s.size());
    }
    if (longest > 0) return {text.substr(0, end - longest), true};
  }
  return {text, false};
}

bool is_prefix_of_some(const std::string& held, const std::vector<std::string>& stops) {
  for (const auto& s : stops) {
    if (s.compare(0, held.size(), held) == 0 && held.size() < s.size()) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("A stop string split across deltas is found and the text before it released", "[stop_matcher]") {
  StopStringMatcher matcher({"###", "END"});
  std::string out;
  auto r = matcher.push("Hello #");
  CHECK(r.text == "Hello ");
  CHECK_FALSE(r.stopped);
  r = matcher.push("#");
  CHECK(r.text.empty());
  CHECK(matcher.num_held_bytes() == 2);
  r = matcher.push("# trailing");
  CHECK(r.text.empty());
  CHECK(r.stopped);
  CHECK(matcher.matched_index() == 0);
  CHECK(matcher.push("more").text.empty());
  CHECK(matcher.flush().empty());
}

TEST_CASE("Held text that stops matching is released, and flush releases the rest", "[stop_matcher]") {
  StopStringMatcher matcher({"stop here"});
  CHECK(matcher.push("we sto").text == "we ");
  CHECK(matcher.push("p h").text.empty());
  CHECK(matcher.push("ere? no, there").text.empty());  // completes "stop here"
  CHECK(matcher.stopped());

  StopStringMatcher other({"stop here"});
  CHECK(other.push("we sto").text == "we ");
  CHECK(other.push("p t").text == "stop t");
  CHECK(other.push("he st").text == "he ");
  CHECK(other.flush() == "st");
  CHECK_FALSE(other.stopped());
}

TEST_CASE("The stop string completed first wins when several match", "[stop_matcher]") {
  StopStringMatcher matcher({"world", "o w"});
  auto r = matcher.push("hello world");
  CHECK(r.stopped);
  CHECK(r.text == "hell");
  CHECK(matcher.matched_index() == 1);
  // "bcd" starts first but "c" completes first, whatever the split.
  StopStringMatcher late({"bcd", "c"});
  CHECK(late.push("abcd").text == "ab");
  CHECK(late.matched_index() == 1);
  StopStringMatcher longest({"d", "bcd"});
  CHECK(longest.push("abcde").text == "a");
  CHECK(longest.matched_index() == 1);
}

TEST_CASE("Without stop strings every delta passes through at once", "[stop_matcher]") {
  StopStringMatcher matcher({});
  CHECK(matcher.push("abc").text == "abc");
  CHECK(matcher.num_held_bytes() == 0);
  CHECK(matcher.flush().empty());
}

TEST_CASE("An empty stop string is an invalid argument", "[stop_matcher]") {
  CHECK_THROWS_AS(StopStringMatcher({"ok", ""}), llmk::Error);
}

TEST_CASE("Random texts split at random points give the reference truncation", "[stop_matcher]") {
  std::mt19937 rng(2024);
  const std::string alphabet = "ab c";
  auto random_string = [&](size_t max_len, size_t min_len) {
    std::string s(min_len + rng() % (max_len - min_len + 1), 'a');
    for (auto& c : s) c = alphabet[rng() % alphabet.size()];
    return s;
  };
  for (int trial = 0; trial < 5000; ++trial) {
    std::vector<std::string> stops(rng() % 3 + 1);
    for (auto& s : stops) s = random_string(4, 1);
    const std::string text = random_string(30, 0);
    const auto [expected, expect_stop] = reference_truncation(text, stops);

    StopStringMatcher matcher(stops);
    std::string emitted, pushed;
    size_t pos = 0;
    bool stopped = false;
    while (pos < text.size()) {
      const size_t len = std::min(text.size() - pos, size_t(rng() % 5));
      pushed += text.substr(pos, len);
      const auto r = matcher.push(std::string_view(text).substr(pos, len));
      pos += len;
      emitted += r.text;
      stopped = r.stopped;
      INFO("trial " << trial << " text '" << text << "'");
      if (!stopped) {
        // Nothing lost, and only a possible stop-string start is held.
        REQUIRE(emitted.size() + matcher.num_held_bytes() == pushed.size());
        const std::string held = pushed.substr(emitted.size());
        REQUIRE((held.empty() || is_prefix_of_some(held, stops)));
      }
    }
    emitted += matcher.flush();
    std::string all_stops;
    for (const auto& s : stops) all_stops += "'" + s + "' ";
    INFO("trial " << trial << " text '" << text << "' stops " << all_stops);
    REQUIRE(stopped == expect_stop);
    REQUIRE(emitted == expected);
  }
}

TEST_CASE("Stop strings split across tokens of real detokenized text, CJK included", "[stop_matcher]") {
  llmk::Tokenizer tokenizer(kLlamaModel);
  const std::string text = "The answer is 42.\nUser: 你好 again";
  for (const auto& [stop, expected] : std::vector<std::pair<std::string, std::string>>{
           {"\nUser:", "The answer is 42."}, {"你好", "The answer is 42.\nUser: "}, {"42.\nU", "The answer is "}}) {
    const auto ids = tokenizer.encode(text, true);
    llmk::IncrementalDetokenizer detok(tokenizer, false);
    StopStringMatcher matcher({stop});
    std::string emitted;
    bool stopped = false;
    for (int32_t id : ids) {
      const auto r = matcher.push(detok.push(id));
      emitted += r.text;
      if (r.stopped) {
        stopped = true;
        break;
      }
    }
    INFO("stop '" << stop << "'");
    CHECK(stopped);
    CHECK(emitted == expected);
  }
}
