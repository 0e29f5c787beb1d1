/* llmk KV-cache allocator plugin API (kind LLMK_PLUGIN_KV_ALLOCATOR).
 *
 * An allocator is pure bookkeeping over num_slots token slots; the host owns
 * the memory. It hands out slots to sequences and describes them through a
 * block table (see llmk_attention.h for the addressing rule). When it moves
 * or duplicates data (copy-on-write, relocation) it returns copy operations
 * that the host performs on every layer before the next forward.
 *
 * Sequence ids are chosen by the host and unique among live sequences. */
#ifndef LLMK_KV_ALLOCATOR_H
#define LLMK_KV_ALLOCATOR_H

#include "llmk_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Majors (each broke compatibility):
 * 2: every entry point after create returns a status and fills llmk_error,
 * so that no failure inside a plugin can end the host process.
 * Minors of 2 (each appended to llmk_kv_allocator_desc and
 * llmk_kv_allocator_api, see llmk_plugin.h):
 * 2.1: prefix-cache events (desc event_sink; default when absent: no
 *      events) and cached_blocks (default when absent: not reported).
 * 2.2: flush_cache (default when absent: nothing to drop).
 * 2.3: truncate_seq (default when absent: no rollback; the host then runs
 *      no speculative decoding over the allocator).
 * 2.4: evict_tokens (default when absent: no eviction; the host then runs
 *      no StreamingLLM window, kv_cache.window, over the allocator). */
#define LLMK_KV_ALLOCATOR_API_MAJOR 2u
#define LLMK_KV_ALLOCATOR_API_MINOR 4u
#ifndef LLMK_KV_ALLOCATOR_API_BUILD_MINOR
#define LLMK_KV_ALLOCATOR_API_BUILD_MINOR LLMK_KV_ALLOCATOR_API_MINOR
#endif
#define LLMK_KV_ALLOCATOR_API_VERSION \
  LLMK_API_VERSION(LLMK_KV_ALLOCATOR_API_MAJOR, LLMK_KV_ALLOCATOR_API_BUILD_MINOR)

/* A change to the set of blocks a prefix cache can hit. A block is named by
 * its hash, which chains its parent's hash and its tokens; the hashes of the
 * blocks cached at any moment are distinct. Replaying the events in order
 * from an empty set gives the allocator's set of cached blocks. */
typedef enum llmk_kv_event_type {
  LLMK_KV_EVENT_BLOCK_STORED = 1,       /* block_hash now cached, holding token_ids */
  LLMK_KV_EVENT_BLOCK_REMOVED = 2,      /* block_hash no longer cached (evicted, replaced) */
  LLMK_KV_EVENT_ALL_BLOCKS_CLEARED = 3  /* nothing is cached any more */
} llmk_kv_event_type;

typedef struct llmk_kv_event {
  uint32_t struct_size;
  uint32_t type;               /* llmk_kv_event_type */
  uint64_t block_hash;         /* stored, removed */
  uint64_t parent_block_hash;  /* stored: the previous block of its prefix, when has_parent */
  int has_parent;              /* 0: the block starts a prompt */
  const int32_t* token_ids;    /* stored: [num_tokens] (one block), valid during the call only */
  uint32_t num_tokens;
} llmk_kv_event;

typedef void (*llmk_kv_event_sink)(void* ctx, const llmk_kv_event* event);

typedef struct llmk_kv_allocator_desc {
  uint32_t struct_size;
  uint32_t num_slots;      /* token slots in the cache */
  uint32_t block_size;     /* paged allocators: tokens per block */
  uint32_t max_seq_len;    /* longest sequence the host will ask for */
  int enable_prefix_caching;
  const char* options;     /* JSON object of plugin options from config, "{}" when none */
  /* 2.1 (read only when struct_size covers them): where a prefix-caching
   * allocator reports each change to its set of cached blocks, synchronously,
   * from inside the call that made it; NULL: nobody listens. */
  llmk_kv_event_sink event_sink;
  void* event_sink_ctx;
} llmk_kv_allocator_desc;

/* Move num_slots consecutive slots' K/V from src_slot to dst_slot, in every layer. */
typedef struct llmk_kv_copy {
  int32_t src_slot;
  int32_t dst_slot;
  int32_t num_slots;
} llmk_kv_copy;

typedef struct llmk_kv_reserve_args {
  uint64_t seq_id;
  const int32_t* tokens;      /* [num_tokens] the prompt (and, when resuming, tokens already generated) */
  uint32_t num_tokens;        /* slots needed now */
  uint32_t max_total_tokens;  /* the sequence will never exceed this (prompt + max_tokens, capped) */
} llmk_kv_reserve_args;

typedef struct llmk_kv_usage {
  uint64_t total_slots;        /* capacity */
  uint64_t reserved_slots;     /* slots owned by live sequences or held by the prefix cache */
  uint64_t used_slots;         /* slots holding live tokens */
  uint64_t cached_free_slots;  /* prefix-cache slots no live sequence references (evictable) */
  uint64_t num_seqs;
  uint64_t prefix_query_tokens;  /* tokens looked up in the prefix cache */
  uint64_t prefix_hit_tokens;    /* of those, found */
  uint64_t num_relocations;      /* sequences moved to a new range */
  uint64_t num_extend_in_place;  /* ranges grown without moving */
  uint64_t num_cow_copies;       /* blocks copied on write */
  uint64_t largest_free_run;     /* longest run of free slots (fragmentation) */
} llmk_kv_usage;

typedef struct llmk_kv_allocator_api {
  uint32_t api_version;  /* LLMK_KV_ALLOCATOR_API_VERSION */
  uint32_t struct_size;
  int (*supports)(const llmk_kv_allocator_desc* desc, char* why, size_t why_len);
  void* (*create)(const llmk_kv_allocator_desc* desc, llmk_error* err);
  void (*destroy)(void* self);
  /* Give a new sequence room for args->num_tokens tokens. All or nothing:
   * LLMK_ERR_NO_SPACE leaves the allocator unchanged. *num_cached_tokens
   * receives how many leading tokens already hold valid K/V (prefix cache
   * hit; always a multiple of the block size and < num_tokens). */
  int (*reserve)(void* self, const llmk_kv_reserve_args* args, uint32_t* num_cached_tokens, llmk_error* err);
  /* Grow a sequence to num_tokens. May append copies (at most max_copies)
   * that the host must perform before writing. LLMK_ERR_NO_SPACE leaves the
   * sequence as it was. */
  int (*extend)(void* self, uint64_t seq_id, uint32_t num_tokens, llmk_kv_copy* copies,
                uint32_t max_copies, uint32_t* num_copies, llmk_error* err);
  /* child shares parent's tokens so far (copy-on-write where supported). */
  int (*fork)(void* self, uint64_t parent_id, uint64_t child_id, llmk_error* err);
  /* Release a sequence's slots. */
  int (*free_seq)(void* self, uint64_t seq_id, llmk_error* err);
  /* The tokens of positions [first, first+n) now hold valid K/V: lets a
   * prefix cache index full blocks. */
  int (*commit_tokens)(void* self, uint64_t seq_id, uint32_t first, const int32_t* tokens, uint32_t n,
                       llmk_error* err);
  /* Write up to max_entries block table entries; *num_entries receives how
   * many the sequence has (which may exceed max_entries). */
  int (*block_table)(const void* self, uint64_t seq_id, int32_t* entries, uint32_t max_entries,
                     uint32_t* num_entries, llmk_error* err);
  /* Tokens per block (1 for allocators that are not paged); asked once. */
  int (*block_size)(const void* self, uint32_t* block_size, llmk_error* err);
  int (*usage)(const void* self, llmk_kv_usage* out, llmk_error* err);
#if LLMK_KV_ALLOCATOR_API_BUILD_MINOR >= 1
  /* 2.1, optional (NULL: an allocator without a prefix cache). Writes up to
   * max_blocks hashes of the blocks cached now, in no particular order;
   * *num_blocks receives how many there are (which may exceed max_blocks). */
  int (*cached_blocks)(const void* self, uint64_t* hashes, uint32_t max_blocks, uint32_t* num_blocks,
                       llmk_error* err);
#endif
#if LLMK_KV_ALLOCATOR_API_BUILD_MINOR >= 2
  /* 2.2, optional (NULL: an allocator without a prefix cache, nothing to
   * drop). Drops every cached block that no live sequence references, each
   * reported to the event sink as BLOCK_REMOVED; blocks live sequences hold
   * stay cached. *num_dropped receives how many blocks were dropped. */
  int (*flush_cache)(void* self, uint32_t* num_dropped, llmk_error* err);
#endif
#if LLMK_KV_ALLOCATOR_API_BUILD_MINOR >= 3
  /* 2.3, optional (NULL: the allocator cannot roll back). Shrinks a sequence
   * to its first num_tokens tokens, 1 <= num_tokens <= its length: the slots
   * of later positions (speculated tokens the model rejected) are given up.
   * Blocks left holding none of its positions are released as free_seq
   * releases them; an allocator of one range per sequence keeps its range.
   * Never copies. num_tokens is never below the tokens the host committed
   * (commit_tokens): only unverified tokens are rolled back, and those were
   * never committed, so no prefix-cache entry covers them. An allocator with
   * a prefix cache refuses a smaller num_tokens (LLMK_ERR_INVALID_ARGUMENT). */
  int (*truncate_seq)(void* self, uint64_t seq_id, uint32_t num_tokens, llmk_error* err);
#endif
#if LLMK_KV_ALLOCATOR_API_BUILD_MINOR >= 4
  /* 2.4, optional (NULL: the allocator cannot evict). StreamingLLM's
   * rolling window: drops positions [first, first + num_tokens) of a
   * sequence (num_tokens >= 1, first + num_tokens <= its length); each later
   * position p becomes p - num_tokens, and the length shrinks by num_tokens.
   * A paged allocator needs first and num_tokens to be multiples of its
   * block size (else LLMK_ERR_INVALID_ARGUMENT) and only takes the blocks out
   * of the table, releasing them as free_seq does: no copy. An allocator of
   * one range per sequence keeps its range and appends the copies that move
   * the later rows down (at most max_copies; a host gives room for
   * length / num_tokens + 2 + its live sequences), each copy's source and
   * destination disjoint, to be performed in order before the next write;
   * first the copies of forks still waiting for this sequence's rows, which
   * take them before they move. From then on the
   * sequence's cache positions are not its tokens' positions: commit_tokens
   * on it is ignored, so no prefix-cache entry ever covers a shifted row
   * (blocks it committed before stay valid for other sequences). */
  int (*evict_tokens)(void* self, uint64_t seq_id, uint32_t first, uint32_t num_tokens, llmk_kv_copy* copies,
                      uint32_t max_copies, uint32_t* num_copies, llmk_error* err);
#endif
} llmk_kv_allocator_api;

#ifdef __cplusplus
}
#endif

#endif /* LLMK_KV_ALLOCATOR_H */
