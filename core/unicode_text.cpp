#include "core/unicode_text.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#if LLMK_HAVE_ICU
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#endif

#include "core/error.hpp"

namespace llmk {

UnicodeRegex::UnicodeRegex(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw Error(ErrorCode::bad_checkpoint, "regex '" + pattern + "' does not compile at offset " +
                                               std::to_string(offset) + ": " +
                                               reinterpret_cast<const char*>(message));
  }
  // JIT is an optimisation: when unavailable, pcre2_match interprets.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

UnicodeRegex::~UnicodeRegex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void UnicodeRegex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const {
  auto* code = static_cast<pcre2_code*>(code_);
  struct MatchDataFree {
    void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
  };
  // One match data per thread: the pattern is shared by concurrent encoders.
  thread_local std::unique_ptr<pcre2_match_data, MatchDataFree> data(pcre2_match_data_create(1, nullptr));
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start < text.size()) {
    // The text was validated once by the caller; PCRE2 need not check it again.
    const int rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw Error(ErrorCode::invalid_argument,
                  std::string("regex match failed: ") + reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.get());
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      matches.emplace_back(b, e);
      start = e;
    } else {
      // An empty match: step over one character.
      start = b + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
}

bool have_unicode_normalization() { return LLMK_HAVE_ICU != 0; }

std::string normalize_unicode(std::string_view text, NormalForm form) {
#if LLMK_HAVE_ICU
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::nfc: n = icu::Normalizer2::getNFCInstance(status); break;
    case NormalForm::nfd: n = icu::Normalizer2::getNFDInstance(status); break;
    case NormalForm::nfkc: n = icu::Normalizer2::getNFKCInstance(status); break;
    case NormalForm::nfkd: n = icu::Normalizer2::getNFKDInstance(status); break;
  }
  if (U_FAILURE(status)) throw Error(ErrorCode::internal, std::string("ICU normalizer: ") + u_errorName(status));
  std::string out;
  out.reserve(text.size());
  icu::StringByteSink<std::string> sink(&out);
  n->normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), sink, nullptr, status);
  if (U_FAILURE(status)) throw Error(ErrorCode::internal, std::string("ICU normalization: ") + u_errorName(status));
  return out;
#else
  (void)text;
  (void)form;
  throw Error(ErrorCode::unsupported, "Unicode normalization needs ICU, which this build lacks");
#endif
}

namespace {

bool stands_for_itself(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); }

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

struct ByteTables {
  ByteLevelAlphabet alphabet;
  int byte_of_code_point[0x144];  // code points 0..0x143 cover the whole map
  ByteTables() {
    for (int& b : byte_of_code_point) b = -1;
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = stands_for_itself(b) ? static_cast<uint32_t>(b) : next++;
      append_utf8(alphabet.utf8_of_byte[b], cp);
      byte_of_code_point[cp] = b;
    }
  }
};

const ByteTables& byte_tables() {
  static const ByteTables tables;
  return tables;
}

}  // namespace

const ByteLevelAlphabet& ByteLevelAlphabet::get() { return byte_tables().alphabet; }

int ByteLevelAlphabet::byte_of(uint32_t code_point) {
  return code_point < 0x144 ? byte_tables().byte_of_code_point[code_point] : -1;
}

uint32_t next_code_point(std::string_view text, size_t& i) {
  const auto b0 = static_cast<unsigned char>(text[i]);
  int n = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
  uint32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int k = 1; k < n && i + k < text.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
  i += static_cast<size_t>(n);
  return cp;
}

}  // namespace llmk
