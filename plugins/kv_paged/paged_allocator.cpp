#include "plugins/kv_paged/paged_allocator.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "plugins/api/plugin_helpers.hpp"
#include "plugins/kv_common/evict_moves.hpp"

namespace llmk::kv {
namespace {

constexpr uint64_t kRootHash = 0x6c6c6d6b2d6b7621ull;  // parent hash of a prompt's first block

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Parses the options JSON; throws std::runtime_error naming the bad key.
uint32_t parse_hash_bits(const char* options) {
  uint32_t hash_bits = 64;
  if (options == nullptr || options[0] == '\0') return hash_bits;
  const auto j = nlohmann::json::parse(options, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw std::runtime_error("kv.paged options are not a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key != "hash_bits") throw std::runtime_error("kv.paged: unknown option '" + key + "' (known: hash_bits)");
    if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > 64) {
      throw std::runtime_error("kv.paged: option 'hash_bits' must be an integer in 1..64");
    }
    hash_bits = value.get<uint32_t>();
  }
  return hash_bits;
}

[[noreturn]] void invalid(const std::string& message) {
  throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT, "kv.paged: " + message);
}

}  // namespace

bool PagedAllocator::supports(const llmk_kv_allocator_desc& desc, std::string& why) {
  if (desc.block_size < 8 || desc.block_size > 256) {
    why = "block_size " + std::to_string(desc.block_size) + " is outside 8..256";
    return false;
  }
  if (desc.num_slots / desc.block_size == 0) {
    why = "num_slots " + std::to_string(desc.num_slots) + " holds no block of " + std::to_string(desc.block_size);
    return false;
  }
  if (desc.max_seq_len == 0) {
    why = "max_seq_len is 0";
    return false;
  }
  try {
    parse_hash_bits(desc.options);
  } catch (const std::exception& e) {
    why = e.what();
    return false;
  }
  return true;
}

PagedAllocator::PagedAllocator(const llmk_kv_allocator_desc& desc)
    : block_size_(desc.block_size), max_seq_len_(desc.max_seq_len), prefix_caching_(desc.enable_prefix_caching != 0) {
  std::string why;
  if (!supports(desc, why)) throw plugin::Error(LLMK_ERR_UNSUPPORTED, "kv.paged: " + why);
  const uint32_t bits = parse_hash_bits(desc.options);
  hash_mask_ = bits == 64 ? ~0ull : ((1ull << bits) - 1);
  if (desc.struct_size >= offsetof(llmk_kv_allocator_desc, event_sink_ctx) + sizeof(void*)) {
    event_sink_ = desc.event_sink;
    event_sink_ctx_ = desc.event_sink_ctx;
  }
  const uint32_t n = desc.num_slots / block_size_;
  blocks_.resize(n);
  free_.reserve(n);
  for (uint32_t b = n; b-- > 0;) free_.push_back(b);  // block 0 is handed out first
}

uint64_t PagedAllocator::block_hash(uint64_t parent_hash, const int32_t* tokens) const {
  uint64_t h = mix(parent_hash);
  for (uint32_t i = 0; i < block_size_; ++i) h = mix(h ^ static_cast<uint32_t>(tokens[i]));
  return h & hash_mask_;
}

uint32_t PagedAllocator::take_block() {
  uint32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    b = lru_.front();  // callers checked num_allocatable()
    uncache(b);        // moves it to the free list
    free_.pop_back();
  }
  blocks_[b].fill = 0;
  return b;
}

void PagedAllocator::add_ref(uint32_t b) {
  Block& blk = blocks_[b];
  if (blk.ref_count++ == 0) {
    if (blk.in_lru) {
      lru_.erase(blk.lru_pos);
      blk.in_lru = false;
    }
    used_slots_ += blk.fill;
  }
}

void PagedAllocator::release(uint32_t b) {
  Block& blk = blocks_[b];
  if (--blk.ref_count > 0) return;
  used_slots_ -= blk.fill;
  if (blk.cached) {
    blk.lru_pos = lru_.insert(lru_.end(), b);
    blk.in_lru = true;
  } else {
    free_.push_back(b);
  }
}

void PagedAllocator::emit(const llmk_kv_event& event) const {
  if (event_sink_ != nullptr) event_sink_(event_sink_ctx_, &event);
}

void PagedAllocator::uncache(uint32_t b) {
  Block& blk = blocks_[b];
  if (!blk.cached) return;
  emit(llmk_kv_event{sizeof(llmk_kv_event), LLMK_KV_EVENT_BLOCK_REMOVED, blk.hash, 0, 0, nullptr, 0});
  auto it = cache_.find(blk.hash);
  if (it != cache_.end() && it->second == b) cache_.erase(it);
  blk.cached = false;
  blk.uid = 0;
  blk.parent_uid = 0;
  blk.tokens.clear();
  if (blk.in_lru) {
    lru_.erase(blk.lru_pos);
    blk.in_lru = false;
    free_.push_back(b);
  }
}

PagedAllocator::Sequence& PagedAllocator::get(uint64_t seq_id, const char* what) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) invalid(std::string(what) + ": unknown sequence " + std::to_string(seq_id));
  return it->second;
}

llmk_status PagedAllocator::reserve(const llmk_kv_reserve_args& args, uint32_t* num_cached_tokens) {
  const uint32_t n = args.num_tokens;
  if (seqs_.count(args.seq_id)) invalid("reserve: sequence " + std::to_string(args.seq_id) + " already exists");
  if (n == 0 || n > max_seq_len_) {
    invalid("reserve: num_tokens " + std::to_string(n) + " outside 1..max_seq_len " + std::to_string(max_seq_len_));
  }
  // Longest run of registered full blocks matching the prompt, leaving at
  // least one token to compute (its logits are needed).
  std::vector<uint32_t> hits;
  uint64_t chain_hash = kRootHash;
  uint64_t chain_uid = 0;
  const bool lookup = prefix_caching_ && args.tokens != nullptr;
  if (lookup) {
    const uint32_t max_hits = (n - 1) / block_size_;
    for (uint32_t i = 0; i < max_hits; ++i) {
      const int32_t* block_tokens = args.tokens + static_cast<size_t>(i) * block_size_;
      const uint64_t h = block_hash(chain_hash, block_tokens);
      auto it = cache_.find(h);
      if (it == cache_.end()) break;
      const Block& blk = blocks_[it->second];
      if (blk.parent_uid != chain_uid ||
          std::memcmp(blk.tokens.data(), block_tokens, block_size_ * sizeof(int32_t)) != 0) {
        break;  // a collision or a stale entry: a miss, never wrong K/V
      }
      hits.push_back(it->second);
      chain_hash = h;
      chain_uid = blk.uid;
    }
  }
  const uint32_t num_hits_unreferenced = static_cast<uint32_t>(
      std::count_if(hits.begin(), hits.end(), [&](uint32_t b) { return blocks_[b].ref_count == 0; }));
  const uint32_t num_new = blocks_for(n) - static_cast<uint32_t>(hits.size());
  if (num_new > num_allocatable() - num_hits_unreferenced) return LLMK_ERR_NO_SPACE;

  Sequence seq;
  seq.blocks.reserve(blocks_for(n));
  for (uint32_t b : hits) {
    add_ref(b);
    seq.blocks.push_back(b);
  }
  for (uint32_t i = static_cast<uint32_t>(hits.size()); i < blocks_for(n); ++i) {
    const uint32_t b = take_block();
    blocks_[b].fill = std::min(block_size_, n - i * block_size_);
    add_ref(b);
    seq.blocks.push_back(b);
  }
  seq.num_tokens = n;
  seq.num_committed = static_cast<uint32_t>(hits.size()) * block_size_;
  seq.chain_hash = chain_hash;
  seq.chain_uid = chain_uid;
  seqs_.emplace(args.seq_id, std::move(seq));
  if (lookup) {
    prefix_query_tokens_ += n;
    prefix_hit_tokens_ += static_cast<uint64_t>(hits.size()) * block_size_;
  }
  if (num_cached_tokens) *num_cached_tokens = static_cast<uint32_t>(hits.size()) * block_size_;
  return LLMK_OK;
}

llmk_status PagedAllocator::extend(uint64_t seq_id, uint32_t num_tokens, llmk_kv_copy* copies,
                                   uint32_t max_copies, uint32_t* num_copies) {
  if (num_copies) *num_copies = 0;
  Sequence& seq = get(seq_id, "extend");
  if (num_tokens < seq.num_tokens || num_tokens > max_seq_len_) {
    invalid("extend: sequence " + std::to_string(seq_id) + " has " + std::to_string(seq.num_tokens) +
            " tokens; cannot extend to " + std::to_string(num_tokens) + " (max_seq_len " +
            std::to_string(max_seq_len_) + ")");
  }
  if (num_tokens == seq.num_tokens) return LLMK_OK;
  const uint32_t tail = seq.num_tokens % block_size_;  // tokens in a partially filled last block
  const bool cow = tail != 0 && blocks_[seq.blocks.back()].ref_count > 1;
  const uint32_t num_new = blocks_for(num_tokens) - static_cast<uint32_t>(seq.blocks.size()) + (cow ? 1 : 0);
  if (cow && (copies == nullptr || max_copies < 1)) invalid("extend: copy-on-write needs room for one copy");
  if (num_new > num_allocatable()) return LLMK_ERR_NO_SPACE;

  if (cow) {
    // Another sequence shares the partial block we are about to write into:
    // give this one a private copy of the shared prefix.
    const uint32_t shared = seq.blocks.back();
    const uint32_t b = take_block();
    blocks_[b].fill = tail;
    add_ref(b);
    release(shared);
    seq.blocks.back() = b;
    copies[0] = llmk_kv_copy{static_cast<int32_t>(shared * block_size_), static_cast<int32_t>(b * block_size_),
                             static_cast<int32_t>(tail)};
    if (num_copies) *num_copies = 1;
    ++num_cow_copies_;
  }
  if (tail != 0) {  // grow the (now private) last block
    Block& last = blocks_[seq.blocks.back()];
    const uint32_t fill = std::min(block_size_, num_tokens - (static_cast<uint32_t>(seq.blocks.size()) - 1) * block_size_);
    used_slots_ += fill - last.fill;
    last.fill = fill;
  }
  for (uint32_t i = static_cast<uint32_t>(seq.blocks.size()); i < blocks_for(num_tokens); ++i) {
    const uint32_t b = take_block();
    blocks_[b].fill = std::min(block_size_, num_tokens - i * block_size_);
    add_ref(b);
    seq.blocks.push_back(b);
  }
  seq.num_tokens = num_tokens;
  return LLMK_OK;
}

llmk_status PagedAllocator::fork(uint64_t parent_id, uint64_t child_id) {
  if (seqs_.count(child_id)) invalid("fork: sequence " + std::to_string(child_id) + " already exists");
  const Sequence& parent = get(parent_id, "fork");
  Sequence child = parent;  // shares every block, including a partial last one
  for (uint32_t b : child.blocks) ++blocks_[b].ref_count;
  seqs_.emplace(child_id, std::move(child));
  return LLMK_OK;
}

void PagedAllocator::free_seq(uint64_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;  // idempotent
  // Last block first: a prefix's tail is evicted before its head.
  const auto& blocks = it->second.blocks;
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) release(*b);
  seqs_.erase(it);
}

void PagedAllocator::truncate_seq(uint64_t seq_id, uint32_t num_tokens) {
  Sequence& seq = get(seq_id, "truncate_seq");
  if (num_tokens == 0 || num_tokens > seq.num_tokens) {
    invalid("truncate_seq: sequence " + std::to_string(seq_id) + " has " + std::to_string(seq.num_tokens) +
            " tokens; cannot truncate to " + std::to_string(num_tokens));
  }
  if (num_tokens < seq.num_committed) {
    invalid("truncate_seq: sequence " + std::to_string(seq_id) + " committed " + std::to_string(seq.num_committed) +
            " tokens; cannot truncate to " + std::to_string(num_tokens) + " (committed K/V is never rolled back)");
  }
  const uint32_t keep = blocks_for(num_tokens);
  while (seq.blocks.size() > keep) {  // past the committed tokens: never registered
    release(seq.blocks.back());
    seq.blocks.pop_back();
  }
  // The last block's fill covers the longest of the sequences sharing it.
  const uint32_t level = keep - 1, b = seq.blocks.back();
  uint32_t fill = num_tokens - level * block_size_;
  if (blocks_[b].ref_count > 1) {
    for (const auto& [id, other] : seqs_)
      if (id != seq_id && other.blocks.size() > level && other.blocks[level] == b)
        fill = std::max(fill, std::min(block_size_, other.num_tokens - level * block_size_));
  }
  used_slots_ -= blocks_[b].fill - fill;
  blocks_[b].fill = fill;
  seq.num_tokens = num_tokens;
}

void PagedAllocator::evict_tokens(uint64_t seq_id, uint32_t first, uint32_t num_tokens, llmk_kv_copy* /*copies*/,
                                  uint32_t /*max_copies*/, uint32_t* num_copies) {
  *num_copies = 0;
  Sequence& seq = get(seq_id, "evict_tokens");
  const std::string bad = kv_common::evict_range_error(first, num_tokens, seq.num_tokens);
  if (!bad.empty()) invalid("evict_tokens: sequence " + std::to_string(seq_id) + ": " + bad);
  if (first % block_size_ != 0 || num_tokens % block_size_ != 0)
    invalid("evict_tokens: first " + std::to_string(first) + " and num_tokens " + std::to_string(num_tokens) +
            " must be multiples of the block size " + std::to_string(block_size_));
  const auto begin = seq.blocks.begin() + first / block_size_, end = begin + num_tokens / block_size_;
  for (auto b = end; b != begin;) release(*--b);  // the tail first, as free_seq does
  seq.blocks.erase(begin, end);
  seq.num_tokens -= num_tokens;
  // Its positions no longer match its tokens: nothing more is indexed.
  seq.indexing = false;
  seq.pending.clear();
  seq.num_committed = std::min(seq.num_committed, first);
}

void PagedAllocator::commit_tokens(uint64_t seq_id, uint32_t first, const int32_t* tokens, uint32_t n) {
  if (!prefix_caching_ || tokens == nullptr) return;
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  Sequence& seq = it->second;
  if (!seq.indexing) return;
  if (first > seq.num_committed) {
    seq.indexing = false;  // a gap: what follows cannot be indexed
    return;
  }
  const uint32_t end = std::min<uint64_t>(static_cast<uint64_t>(first) + n, seq.num_tokens);
  for (uint32_t p = seq.num_committed; p < end; ++p) {
    seq.pending.push_back(tokens[p - first]);
    ++seq.num_committed;
    if (seq.pending.size() == block_size_) register_block(seq, seq.num_committed / block_size_ - 1);
  }
}

void PagedAllocator::register_block(Sequence& seq, uint32_t level) {
  const uint64_t h = block_hash(seq.chain_hash, seq.pending.data());
  auto it = cache_.find(h);
  if (it != cache_.end()) {
    Block& other = blocks_[it->second];
    if (other.parent_uid == seq.chain_uid && other.tokens == seq.pending) {
      // Same content already registered (possibly this very block): follow it.
      seq.chain_hash = h;
      seq.chain_uid = other.uid;
      seq.pending.clear();
      return;
    }
    uncache(it->second);  // stale or a collision: the newer registration wins
  }
  const uint32_t b = seq.blocks[level];
  uncache(b);
  Block& blk = blocks_[b];
  blk.cached = true;
  blk.hash = h;
  blk.uid = next_uid_++;
  blk.parent_uid = seq.chain_uid;
  blk.tokens = seq.pending;
  cache_[h] = b;
  emit(llmk_kv_event{sizeof(llmk_kv_event), LLMK_KV_EVENT_BLOCK_STORED, h, seq.chain_hash, seq.chain_uid != 0 ? 1 : 0,
                     blk.tokens.data(), block_size_});
  seq.chain_hash = h;
  seq.chain_uid = blk.uid;
  seq.pending.clear();
}

uint32_t PagedAllocator::block_table(uint64_t seq_id, int32_t* entries, uint32_t max_entries) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return 0;
  const auto& blocks = it->second.blocks;
  const uint32_t n = static_cast<uint32_t>(blocks.size());
  for (uint32_t i = 0; i < std::min(n, max_entries); ++i) entries[i] = static_cast<int32_t>(blocks[i] * block_size_);
  return n;
}

uint32_t PagedAllocator::cached_blocks(uint64_t* hashes, uint32_t max_blocks) const {
  uint32_t i = 0;
  for (const auto& [hash, block] : cache_) {
    if (i < max_blocks) hashes[i] = hash;
    ++i;
  }
  return i;
}

uint32_t PagedAllocator::flush_cache() {
  uint32_t num_dropped = 0;
  while (!lru_.empty()) {  // uncache takes it off the LRU, onto the free list
    uncache(lru_.front());
    ++num_dropped;
  }
  return num_dropped;
}

void PagedAllocator::usage(llmk_kv_usage& out) const {
  out = llmk_kv_usage{};
  const uint64_t bs = block_size_;
  out.total_slots = blocks_.size() * bs;
  out.reserved_slots = (blocks_.size() - free_.size()) * bs;
  out.used_slots = used_slots_;
  out.cached_free_slots = lru_.size() * bs;
  out.num_seqs = seqs_.size();
  out.prefix_query_tokens = prefix_query_tokens_;
  out.prefix_hit_tokens = prefix_hit_tokens_;
  out.num_cow_copies = num_cow_copies_;
  uint64_t run = 0;
  for (const Block& blk : blocks_) {
    run = (blk.ref_count == 0 && !blk.cached) ? run + 1 : 0;
    out.largest_free_run = std::max(out.largest_free_run, run * bs);
  }
}

}  // namespace llmk::kv
