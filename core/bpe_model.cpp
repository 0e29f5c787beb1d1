#include "core/bpe_model.hpp"

#include <cstdio>
#include <queue>

#include "core/error.hpp"

namespace llmk {

BpeModel::BpeModel(StringIdMap vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options, const std::string& where)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto a = vocab_.find(left), b = vocab_.find(right), m = vocab_.find(left + right);
    for (const auto* missing : {a == vocab_.end() ? &left : nullptr, b == vocab_.end() ? &right : nullptr}) {
      if (missing != nullptr)
        throw Error(ErrorCode::bad_checkpoint, where + "/merges/" + std::to_string(rank) + ": token '" + *missing +
                                                   "' is not in the vocabulary");
    }
    if (m == vocab_.end()) {
      throw Error(ErrorCode::bad_checkpoint, where + "/merges/" + std::to_string(rank) + ": merged token '" + left +
                                                 right + "' is not in the vocabulary");
    }
    // A repeated pair keeps its later rank, as Hugging Face's map does.
    merges_[pair_key(a->second, b->second)] = Merge{static_cast<int32_t>(rank), m->second};
  }
  if (options_.unk_token) {
    auto u = vocab_.find(*options_.unk_token);
    if (u == vocab_.end())
      throw Error(ErrorCode::bad_checkpoint, where + "/unk_token: '" + *options_.unk_token + "' is not in the vocabulary");
    unk_id_ = u->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto it = vocab_.find(std::string_view(name));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWord;
  if (cacheable) {
    std::shared_lock lock(cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge_word(word, out);
  if (cacheable) {
    std::unique_lock lock(cache_mutex_);
    if (cache_.size() < kMaxCacheEntries) cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + first, out.end()));
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  // Symbols form a doubly linked list over a vector; a merge folds the right
  // symbol into the left one. The heap holds candidate pairs by (rank,
  // position); entries made stale by an earlier merge are skipped when
  // popped. O(n log n) in the word's length.
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // indices, -1 at the ends
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, -1, true});
    if (index > 0) symbols[index - 1].next = index;
  };
  bool pending_unk = false;
  size_t i = 0;
  while (i < word.size()) {
    size_t end = i + 1;
    while (end < word.size() && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) ++end;
    const std::string_view ch = word.substr(i, end - i);
    i = end;
    auto it = vocab_.find(ch);
    if (it != vocab_.end()) {
      if (pending_unk) add(unk_id_), pending_unk = false;
      add(it->second);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char c : ch) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        // Hugging Face adds the byte tokens without ending a pending unk.
        for (char c : ch) add(byte_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (pending_unk && !options_.fuse_unk) add(unk_id_);
      pending_unk = true;
    }
    // Without an unk token the character is dropped, as Hugging Face does.
  }
  if (pending_unk) add(unk_id_);

  struct Candidate {
    int32_t rank, pos, new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push_pair = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    auto m = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (m != merges_.end()) queue.push({m->second.rank, left, m->second.new_id});
  };
  for (int32_t k = 0; k + 1 < static_cast<int32_t>(symbols.size()); ++k) push_pair(k);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    auto m = merges_.find(pair_key(left.id, right.id));
    if (m == merges_.end() || m->second.new_id != top.new_id) continue;  // stale
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (const Symbol& s : symbols)
    if (s.alive) out.push_back(s.id);
}

}  // namespace llmk
