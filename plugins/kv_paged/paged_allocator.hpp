// kv.paged: fixed-size blocks, per-sequence block tables, reference counts,
// copy-on-write after fork, and automatic prefix caching.
//
// Blocks are block_size consecutive slots; block b covers slots
// [b * block_size, (b + 1) * block_size) and appears in a block table as
// b * block_size. A block's reference count is the number of live sequences
// whose table holds it. With prefix caching, every full block whose tokens a
// sequence committed is registered under hash(parent hash, its tokens); a
// later reserve walks the prompt block by block and reuses registered blocks.
// A hit is exact, never probabilistic: the block's stored tokens must equal
// the prompt's and its parent registration must be the block matched one
// level up (registration ids are never reused), so a hash collision only
// costs a miss. Blocks no sequence references stay registered ("cached
// free") and are evicted least recently freed first when the free list runs
// out, or all at once by flush_cache. Every registration and every drop of
// one is reported to the desc's event sink (API 2.1) as it happens. See
// docs/kv_allocators.md.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "plugins/api/llmk_kv_allocator.h"

namespace llmk::kv {

class PagedAllocator {
 public:
  static constexpr const char* kName = "kv.paged";
  static constexpr const char* kVersion = "1.0.0";
  static constexpr const char* kDescription =
      "paged KV cache: fixed-size blocks, copy-on-write fork, automatic prefix caching";
  static constexpr const char* kCapabilities =
      R"json({"block_size":{"min":8,"max":256},"prefix_caching":true,"copy_on_write":true,)json"
      R"json("options":{"hash_bits":"1..64, default 64; fewer bits force hash collisions (testing)"}})json";

  static bool supports(const llmk_kv_allocator_desc& desc, std::string& why);
  explicit PagedAllocator(const llmk_kv_allocator_desc& desc);

  llmk_status reserve(const llmk_kv_reserve_args& args, uint32_t* num_cached_tokens);
  llmk_status extend(uint64_t seq_id, uint32_t num_tokens, llmk_kv_copy* copies, uint32_t max_copies,
                     uint32_t* num_copies);
  llmk_status fork(uint64_t parent_id, uint64_t child_id);
  void free_seq(uint64_t seq_id);
  // API 2.3: rolls a sequence back to num_tokens (at least what it committed).
  void truncate_seq(uint64_t seq_id, uint32_t num_tokens);
  // API 2.4: drops whole blocks [first, first + num_tokens) from the table
  // (released as free_seq releases them; no copy) and stops indexing the
  // sequence for the prefix cache.
  void evict_tokens(uint64_t seq_id, uint32_t first, uint32_t num_tokens, llmk_kv_copy* copies, uint32_t max_copies,
                    uint32_t* num_copies);
  void commit_tokens(uint64_t seq_id, uint32_t first, const int32_t* tokens, uint32_t n);
  uint32_t block_table(uint64_t seq_id, int32_t* entries, uint32_t max_entries) const;
  uint32_t block_size() const { return block_size_; }
  void usage(llmk_kv_usage& out) const;
  // The hashes of the registered blocks (API 2.1 cached_blocks).
  uint32_t cached_blocks(uint64_t* hashes, uint32_t max_blocks) const;
  // Drops the registrations of the cached free blocks (API 2.2 flush_cache),
  // each reported as removed; blocks live sequences hold stay registered.
  // Returns how many were dropped.
  uint32_t flush_cache();

  // Introspection (tests, diagnostics).
  uint32_t num_blocks() const { return static_cast<uint32_t>(blocks_.size()); }
  uint32_t ref_count(uint32_t block) const { return blocks_[block].ref_count; }
  bool is_cached(uint32_t block) const { return blocks_[block].cached; }
  const std::vector<int32_t>& cached_tokens(uint32_t block) const { return blocks_[block].tokens; }
  uint64_t cached_hash(uint32_t block) const { return blocks_[block].hash; }
  uint32_t num_free_blocks() const { return static_cast<uint32_t>(free_.size()); }

 private:
  struct Block {
    uint32_t ref_count = 0;
    uint32_t fill = 0;            // slots covered by its sequences' lengths (equal for all sharers)
    bool cached = false;          // registered in the prefix cache
    bool in_lru = false;          // cached and unreferenced: evictable
    uint64_t hash = 0;
    uint64_t uid = 0;             // this registration's id (0 when not cached)
    uint64_t parent_uid = 0;      // registration of the previous block of its prefix (0: first block)
    std::vector<int32_t> tokens;  // [block_size] while cached
    std::list<uint32_t>::iterator lru_pos;
  };
  struct Sequence {
    std::vector<uint32_t> blocks;
    uint32_t num_tokens = 0;       // slots reserved
    uint32_t num_committed = 0;    // leading tokens indexed for prefix caching
    std::vector<int32_t> pending;  // committed tokens of the block being filled
    uint64_t chain_hash = 0;       // hash of the last full committed block (kRootHash before any)
    uint64_t chain_uid = 0;        // registration that holds the same content as that block
    bool indexing = true;          // false after a gap in commits
  };

  uint64_t block_hash(uint64_t parent_hash, const int32_t* tokens) const;
  uint32_t blocks_for(uint32_t num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }
  uint32_t num_allocatable() const { return static_cast<uint32_t>(free_.size() + lru_.size()); }
  uint32_t take_block();              // from the free list, else evicts the LRU cached block
  void add_ref(uint32_t block);       // revives a cached free block
  void release(uint32_t block);       // one reference fewer
  void uncache(uint32_t block);       // drops its registration
  void register_block(Sequence& seq, uint32_t level);
  Sequence& get(uint64_t seq_id, const char* what);
  void emit(const llmk_kv_event& event) const;

  uint32_t block_size_;
  uint32_t max_seq_len_;
  bool prefix_caching_;
  uint64_t hash_mask_ = ~0ull;
  llmk_kv_event_sink event_sink_ = nullptr;  // desc's (API 2.1), nullptr: nobody listens
  void* event_sink_ctx_ = nullptr;
  std::vector<Block> blocks_;
  std::vector<uint32_t> free_;  // unreferenced, unregistered blocks (a stack)
  std::list<uint32_t> lru_;     // unreferenced registered blocks, least recently freed first
  std::unordered_map<uint64_t, uint32_t> cache_;  // hash -> block
  std::unordered_map<uint64_t, Sequence> seqs_;
  uint64_t next_uid_ = 1;
  uint64_t used_slots_ = 0;
  uint64_t prefix_query_tokens_ = 0;
  uint64_t prefix_hit_tokens_ = 0;
  uint64_t num_cow_copies_ = 0;
};

}  // namespace llmk::kv
