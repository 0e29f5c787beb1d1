// The BPE model of Hugging Face's tokenizer.json: a vocabulary, ranked
// merges, and how characters outside the vocabulary are handled.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace llmk {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct BpeOptions {
  std::optional<std::string> unk_token;  // the token for characters outside the vocabulary
  bool fuse_unk = false;                 // consecutive unknown characters make one unk token
  bool byte_fallback = false;            // unknown characters become their <0xNN> byte tokens
  bool ignore_merges = false;            // a word that is itself in the vocabulary is one token
};

class BpeModel {
 public:
  // `merges` in rank order. Throws Error(bad_checkpoint) prefixed with
  // `where` when a merge names a token outside the vocabulary.
  BpeModel(StringIdMap vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
           const std::string& where);

  // Appends the ids of one pre-tokenized word (valid UTF-8). Thread-safe.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  const StringIdMap& vocab() const { return vocab_; }

 private:
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  StringIdMap vocab_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank and merged id
  BpeOptions options_;
  int32_t unk_id_ = -1;
  int32_t byte_ids_[256];  // <0xNN> token of each byte, -1 when absent

  // Words seen before (most text repeats its words); bounded, words of at
  // most kMaxCachedWord bytes.
  static constexpr size_t kMaxCachedWord = 256;
  static constexpr size_t kMaxCacheEntries = 100000;
  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace llmk
