// Scheduler, the StreamingLLM half (kv_cache.window, sink_tokens): a
// sequence keeps its first sink_tokens K/V rows and its newest ones, at most
// `window` rows in all. Before a step would pass the window, the oldest rows
// after the sinks are evicted (KvAllocator::evict_tokens, a multiple of the
// eviction unit at a time) and the later ones move down, so a sequence's
// cache position runs behind its text position by num_evicted_tokens; the
// executor rotates by the text position and scores the sinks by the cache
// one (core/model.cpp). Its KV memory stays at the window however long it
// runs, and it may run past the context length.
#include <algorithm>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "core/scheduler.hpp"

namespace llmk {

void Scheduler::init_stream(const StreamWindow& stream) {
  stream_ = stream;
  if (stream_.window == 0) return;
  const std::string key = "kv_cache.window: " + std::to_string(stream_.window);
  if (!kv_.can_evict())
    throw Error(ErrorCode::invalid_config, key + " needs a KV allocator that evicts rows (evict_tokens, KV allocator "
                                                 "API 2.4); plugins.kv_allocator's cannot");
  if (proposer_)
    throw Error(ErrorCode::invalid_config, key + " does not run with speculative decoding (speculative.method)");
  if (is_static_) throw Error(ErrorCode::invalid_config, key + " needs scheduler.policy continuous (it is static)");
  if (stream_.evict_unit < 1) stream_.evict_unit = 1;
  if (stream_.window < stream_.sink_tokens + stream_.evict_unit)
    throw Error(ErrorCode::invalid_config,
                key + " leaves no room beside the " + std::to_string(stream_.sink_tokens) +
                    " sinks for one eviction of " + std::to_string(stream_.evict_unit) +
                    " rows (kv_cache.block_size): it must be at least their sum");
  // A paged allocator drops whole blocks after the sinks.
  const auto block = static_cast<int32_t>(kv_.block_size());
  if (block < limits_.max_seq_len && stream_.sink_tokens % block != 0)
    throw Error(ErrorCode::invalid_config, "kv_cache.sink_tokens: " + std::to_string(stream_.sink_tokens) +
                                               " is not a multiple of the KV allocator's block size " +
                                               std::to_string(block) + ", which evicts whole blocks");
  if (block < limits_.max_seq_len && stream_.evict_unit % block != 0)
    throw Error(ErrorCode::internal, "scheduler: the eviction unit is not a multiple of the block size");
}

int32_t Scheduler::stream_chunk_limit() const {
  // Evicting at most `window - sinks` rows makes room for this many new ones
  // without dropping a row not yet computed.
  return stream_.window == 0 ? std::numeric_limits<int32_t>::max()
                             : stream_.window - stream_.sink_tokens - stream_.evict_unit + 1;
}

int32_t Scheduler::cache_position(const Sequence& seq, int32_t position) const {
  return position < stream_.sink_tokens ? position : position - seq.num_evicted_tokens;
}

bool Scheduler::make_room(Sequence& seq, int32_t end, std::vector<llmk_kv_copy>& copies) {
  const int32_t want = end - seq.num_evicted_tokens;
  if (want > stream_.window) {
    const int32_t unit = stream_.evict_unit;
    const int32_t count = (want - stream_.window + unit - 1) / unit * unit;
    const int32_t computed = seq.num_computed_tokens - seq.num_evicted_tokens;  // cache rows holding K/V
    if (stream_.sink_tokens + count > computed)
      throw Error(ErrorCode::internal, "scheduler: evicting " + std::to_string(count) + " rows of sequence " +
                                           std::to_string(seq.seq_id) + " would drop rows not computed yet");
    kv_.evict_tokens(seq.seq_id, static_cast<uint32_t>(stream_.sink_tokens), static_cast<uint32_t>(count),
                     static_cast<uint32_t>(seq.num_cache_rows), copies);
    seq.num_evicted_tokens += count;
    seq.num_cache_rows -= count;
    stats_.num_evicted_tokens += static_cast<uint64_t>(count);
  }
  const int32_t need = end - seq.num_evicted_tokens;
  if (need > seq.num_cache_rows) {
    if (!kv_.extend(seq.seq_id, static_cast<uint32_t>(need), copies)) return false;
    seq.num_cache_rows = need;
  }
  return true;
}

}  // namespace llmk
