// Test fixtures for tokenizer.json: Llama-3-, Qwen2-, Llama-2- and
// Metaspace-style tokenizer.json files built by tests/core/tokenizer_json_reference.py with
// Hugging Face's `tokenizers`, and that library's results for a corpus.
// Both need the project venv; fixtures_dir() returns nothing without it.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "support/venv.hpp"

namespace llmk::test {

namespace fs = std::filesystem;

inline fs::path reference_script() { return fs::path(LLMK_SOURCE_DIR) / "tests" / "core" / "tokenizer_json_reference.py"; }
inline fs::path llama2_spm_model() { return fs::path(LLMK_SHARED_DIR) / "models" / "llama2-tokenizer" / "tokenizer.model"; }

inline std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

inline std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline fs::path make_temp_dir(const std::string& stem) {
  std::string pattern = (fs::temp_directory_path() / (stem + "XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  return pattern;
}

// The fixtures, built once per version of the script under the build tree
// (another test process may build them at the same time: each builds into
// its own directory and renames it into place).
inline std::optional<fs::path> fixtures_dir() {
  if (!fs::exists(venv_python())) return std::nullopt;
  const size_t version = std::hash<std::string>{}(read_all(reference_script()));
  const fs::path dir = fs::path(LLMK_BINARY_DIR) / "tests" / ("tokenizer_json_fixtures_" + std::to_string(version));
  if (fs::exists(dir / "done")) return dir;
  const fs::path tmp = make_temp_dir((dir.string() + ".tmp"));
  const std::string cmd = quoted(fs::path(venv_python())) + " " + quoted(reference_script()) + " make " + quoted(tmp) + " " +
                          quoted(llama2_spm_model());
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("fixture generation failed: " + cmd);
  std::ofstream(tmp / "done") << "ok";
  std::error_code ec;
  fs::rename(tmp, dir, ec);  // fails harmlessly when another process won
  if (ec) fs::remove_all(tmp);
  return dir;
}

struct HfReference {
  std::vector<std::vector<int32_t>> encode, encode_bos;  // per text
  std::vector<std::string> decode;                       // of each encode list
  std::vector<std::string> decode_ids;                   // of each id list
};

// Runs Hugging Face's tokenizers on `texts` and `id_lists`.
inline HfReference hf_reference(const fs::path& tokenizer_json, const std::vector<std::string>& texts,
                                const std::vector<std::vector<int32_t>>& id_lists) {
  const fs::path dir = make_temp_dir("llmk_hf_reference");
  std::ofstream(dir / "request.json") << nlohmann::json{{"texts", texts}, {"id_lists", id_lists}}.dump();
  const std::string cmd = quoted(fs::path(venv_python())) + " " + quoted(reference_script()) + " reference " +
                          quoted(tokenizer_json) + " " + quoted(dir / "request.json") + " " + quoted(dir / "out.json");
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("reference run failed: " + cmd);
  const auto j = nlohmann::json::parse(read_all(dir / "out.json"));
  fs::remove_all(dir);
  return {j["encode"].get<std::vector<std::vector<int32_t>>>(), j["encode_bos"].get<std::vector<std::vector<int32_t>>>(),
          j["decode"].get<std::vector<std::string>>(), j["decode_ids"].get<std::vector<std::string>>()};
}

// A varied corpus: code, CJK, emoji with ZWJ sequences and modifiers,
// combining marks, whitespace runs, long numbers, contractions in upper
// case, mixed scripts, special-token text, plus seeded random strings.
inline std::vector<std::string> varied_corpus() {
  std::vector<std::string> texts = {
      "Hello world", " leading space", "trailing spaces   ", "tabs\tand\nnewlines\r\n\n  indented\n\t\tcode",
      "def f(x):\n    return x**2  # square\n", "for (int i = 0; i < 10; ++i) { printf(\"%d\\n\", i); }",
      "#include <vector>\nint main() {\n\tstd::vector<int> v{1, 2, 3};\n}\n",
      "你好，世界！这是一个测试。", "日本語のテキスト、カタカナ、ひらがな", "한국어 문장입니다.",
      "Emoji 😀🎉👍🏽 family 👨‍👩‍👧‍👦 flag 🇫🇷 heart ❤️ 🧑🏿‍💻",
      "e\u0301 vs \u00e9, n\u0303, a\u030a\u0301", "combining: Z\u0351\u0358a\u0334l\u0315g\u0360o",
      "12345678901234567890 3.14159 1,000,000 0x1F 2024-01-01", "I'M HERE, YOU'RE THERE, IT'S DONE, WE'VE GONE, THEY'LL SEE, HE'D GO",
      "don't can't won't shouldn't I'm you're O'Neil's", "Mixed: Привет мир, Γειά σου, مرحبا, नमस्ते, שלום, ไทย",
      "<|begin_of_text|>Hi<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|>",
      "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", "a<tool_call>{\"x\":1}</tool_call>b <tool_call> ",
      "<s>[INST] hi [/INST] ok</s><s>", "<unk> and < s> and <|im_start", "   ", "\n\n\n", " ", "a  b   c    d",
      "end with newline\n", "x\u00a0y\u2003z\u3000w\u0085v", "\uff26\uff35\uff2c\uff2c \uff71\uff72\uff73", "\u00bd \u00b2 \u2462 \u216b",
      "\u03a9 \u03c9 \u017f \u212a", "\u200b\u200d\ufeff", std::string(300, 'A'), "9999999999999999999999999999999999",
      "   \t  \n \t\n  x", "CamelCaseWord snake_case_word kebab-case-word", "https://example.com/a?b=c&d=e#f",
  };
  // The multilingual corpus of tests/data (English, code, numbers, CJK,
  // Arabic, emoji, whitespace runs, contractions, added-token text).
  for (const auto& text : nlohmann::json::parse(read_all(fs::path(LLMK_SOURCE_DIR) / "tests" / "data" /
                                                         "tokenizer_corpus.json")))
    texts.push_back(text.get<std::string>());
  std::string repeated;
  for (int i = 0; i < 200; ++i) repeated += "ab";
  texts.push_back(repeated);
  std::mt19937 rng(5);
  const std::vector<std::string> alphabet = {"a", "b", "e", "t", "s", "Z", "X", " ", " ", "\n", "\t", "'", "0", "7",
                                             ".", ",", "!", "?", "-", "(", "{", "<", "\u00e9", "\u00fc", "\u4f60",
                                             "\u597d", "\U0001F600", "\U0001F44D\U0001F3FD", "\u0301", "\u200d",
                                             "\u00df", "\u0130", "\u0131", "\u3000", "\r", "<|im_end|>", "<s>"};
  for (int i = 0; i < 200; ++i) {
    std::string t;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) t += alphabet[rng() % alphabet.size()];
    texts.push_back(t);
  }
  return texts;
}

}  // namespace llmk::test
