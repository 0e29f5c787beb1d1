// attention.cpu: causal GQA attention over a paged KV cache on CPU threads,
// with an optional sliding window (each query row and each decode starts its
// keys at the window's first position; the rest of the cache is not read).
//
// One call: write the new K/V at slot_mapping, then split the batch into
// work items (sequence, KV head, block of query tokens) spread over OpenMP
// threads. An item gathers the query rows of every query head that shares
// the KV head (K/V are read once per group, never repeated in memory) and
// streams the visible context through attend_chunk in chunks of kChunk keys
// with an online softmax. A prefill chunk is cut into blocks of query tokens
// so that both threads get work; items with many rows use the register-tiled
// kernel (attend_tile.hpp), others the row-by-row one (attend_chunk.hpp).
// A decode (one new token) is an item of its sequence and a range of KV heads
// (all of them when there are enough sequences to keep every thread busy),
// served by the decode kernel (attend_decode.hpp), which reads each cached
// slot's rows for the whole range in one pass.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "plugins/api/plugin_helpers.hpp"
#include "plugins/attention_cpu/attend_chunk.hpp"
#include "plugins/attention_cpu/attend_decode.hpp"
#include "plugins/attention_cpu/attend_tile.hpp"
#include "plugins/attention_cpu/kv_rows.hpp"

namespace llmk::attention_cpu {

namespace {

constexpr int kChunk = kTileKeys;   // keys per online-softmax step
constexpr int kTileMinRows = 4;     // from this many query rows on, the register-tiled kernel
constexpr int kRowsPerItem = 64;    // query rows (tokens x heads of a group) per work item

using plugin::Error;

// Per-thread scratch, sized once at creation.
struct Scratch {
  std::vector<const float*> q_rows, k_rows, v_rows;
  std::vector<float*> out_rows;
  std::vector<int64_t> low_key, last_key;  // per query row: visible keys [low_key, last_key]
  std::vector<float> scores, m, l, acc, k_buf, v_buf, k_t, alpha;
  DecodeScratch decode;
};

struct WorkItem {
  uint32_t seq;
  uint32_t kv_head;
  int32_t first_token;  // batch row of the item's first query token
  int32_t num_tokens;
  uint32_t kv_head_end = 0;  // decode items: KV heads [kv_head, kv_head_end); 0 otherwise
};

}  // namespace

class AttentionCpu {
 public:
  static constexpr const char* kName = "attention.cpu";
  static constexpr const char* kVersion = "1.1.0";
  static constexpr const char* kDescription =
      "CPU causal GQA attention over a paged KV cache (online softmax, OpenMP), F32, F16 or I8 group-quantized KV";
  static constexpr const char* kCapabilities =
      R"({"kv_dtypes":["f32","f16","i8"],"devices":["cpu"],"paged":true,"gqa":true,"sliding_window":true})";

  static bool supports(const llmk_attention_desc& d, std::string& why) {
    if (d.num_heads == 0 || d.num_kv_heads == 0 || d.head_dim == 0) {
      why = "num_heads, num_kv_heads and head_dim must be positive";
      return false;
    }
    if (d.num_heads % d.num_kv_heads != 0) {
      why = "num_kv_heads (" + std::to_string(d.num_kv_heads) + ") must divide num_heads (" +
            std::to_string(d.num_heads) + ")";
      return false;
    }
    if (d.kv_dtype != LLMK_DTYPE_F32 && d.kv_dtype != LLMK_DTYPE_F16 && d.kv_dtype != LLMK_DTYPE_I8) {
      why = "kv_dtype " + std::to_string(d.kv_dtype) + " is not served: only f32, f16 and i8";
      return false;
    }
    if (d.kv_dtype == LLMK_DTYPE_I8 && (d.kv_group_size == 0 || d.head_dim % d.kv_group_size != 0)) {
      why = "i8 KV needs kv_group_size dividing head_dim (" + std::to_string(d.head_dim) + "), got " +
            std::to_string(d.kv_group_size);
      return false;
    }
    if (!(d.scale > 0.0f) || !std::isfinite(d.scale)) {
      why = "scale must be a positive finite number";
      return false;
    }
    return true;
  }

  explicit AttentionCpu(const llmk_attention_desc& d)
      : num_heads_(d.num_heads),
        group_(d.num_heads / d.num_kv_heads),
        scale_(d.scale),
        window_(d.sliding_window),
        num_threads_(std::max<uint32_t>(1, d.num_threads)) {
    std::string why;
    if (!supports(d, why)) throw Error(LLMK_ERR_UNSUPPORTED, why);
    shape_.num_kv_heads = d.num_kv_heads;
    shape_.head_dim = d.head_dim;
    shape_.int8 = d.kv_dtype == LLMK_DTYPE_I8;
    shape_.f16 = d.kv_dtype == LLMK_DTYPE_F16;
    shape_.group_size = shape_.int8 ? d.kv_group_size : 0;
    decode_kernel_ = decode_supports(static_cast<int>(d.head_dim));
    tokens_per_item_ = std::max<int>(1, kRowsPerItem / static_cast<int>(group_));
    const size_t rows = static_cast<size_t>(tokens_per_item_) * group_;
    scratch_.resize(num_threads_);
    for (Scratch& s : scratch_) {
      s.q_rows.resize(rows);
      s.out_rows.resize(rows);
      s.low_key.resize(rows);
      s.last_key.resize(rows);
      s.k_rows.resize(kChunk);
      s.v_rows.resize(kChunk);
      s.scores.resize(rows * kChunk);
      s.m.resize(rows);
      s.l.resize(rows);
      s.acc.resize(rows * d.head_dim);
      s.alpha.resize(rows);
      if (tile_supports(static_cast<int>(d.head_dim))) s.k_t.resize(static_cast<size_t>(d.head_dim) * kTileKeys);
      if (shape_.converted()) {
        s.k_buf.resize(static_cast<size_t>(kChunk) * d.head_dim);
        s.v_buf.resize(static_cast<size_t>(kChunk) * d.head_dim);
      }
      if (decode_kernel_) decode_scratch_resize(s.decode, shape_, num_heads_);
    }
  }

  void forward(const llmk_attention_args& a) {
    validate(a);
    write_kv(a.kv, shape_, a.k, a.v, a.slot_mapping, a.num_tokens, static_cast<int>(num_threads_));

    items_.clear();
    decode_items_.clear();
    // Decodes: split the KV heads only when there are too few sequences to
    // give every thread a few items.
    uint32_t num_decodes = 0;
    for (uint32_t s = 0; s < a.num_seqs; ++s) num_decodes += a.query_start[s + 1] - a.query_start[s] == 1;
    const uint32_t parts =
        num_decodes == 0 ? 1
                         : std::clamp<uint32_t>((4 * num_threads_ + num_decodes - 1) / num_decodes, 1, shape_.num_kv_heads);
    const uint32_t heads_per_part = (shape_.num_kv_heads + parts - 1) / parts;
    for (uint32_t s = 0; s < a.num_seqs; ++s) {
      const int32_t begin = a.query_start[s], end = a.query_start[s + 1];
      if (end <= begin) continue;
      if (end - begin == 1 && decode_kernel_) {
        for (uint32_t h = 0; h < shape_.num_kv_heads; h += heads_per_part)
          decode_items_.push_back({s, h, begin, 1, std::min(h + heads_per_part, shape_.num_kv_heads)});
        continue;
      }
      // Later query blocks see more keys: list them first so they start first.
      for (int32_t t = begin + ((end - begin - 1) / tokens_per_item_) * tokens_per_item_; t >= begin;
           t -= tokens_per_item_)
        for (uint32_t h = 0; h < shape_.num_kv_heads; ++h)
          items_.push_back({s, h, t, std::min(tokens_per_item_, end - t)});
    }
    // Prefill blocks first: the many small decode items then fill the gaps.
    items_.insert(items_.end(), decode_items_.begin(), decode_items_.end());
    const int64_t num_items = static_cast<int64_t>(items_.size());
    // Threads only when the work pays for waking them: query rows x keys x head_dim.
    int64_t work = 0;
    for (uint32_t s = 0; s < a.num_seqs; ++s)
      work += static_cast<int64_t>(a.query_start[s + 1] - a.query_start[s]) * a.context_lens[s];
    work *= static_cast<int64_t>(num_heads_) * shape_.head_dim;
    const int threads = work < (1 << 18) ? 1 : static_cast<int>(std::min<int64_t>(num_threads_, num_items));
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
    for (int64_t i = 0; i < num_items; ++i) run_item(a, items_[i], scratch_[omp_get_thread_num()]);
  }

 private:
  void validate(const llmk_attention_args& a) const {
    if (a.num_seqs == 0) return;
    if (a.query_start[0] != 0 || a.query_start[a.num_seqs] != static_cast<int32_t>(a.num_tokens))
      throw Error(LLMK_ERR_INVALID_ARGUMENT, "query_start must run from 0 to num_tokens");
    if (a.block_size == 0) throw Error(LLMK_ERR_INVALID_ARGUMENT, "block_size is 0");
    for (uint32_t t = 0; t < a.num_tokens; ++t)
      if (a.slot_mapping[t] >= static_cast<int32_t>(a.kv.num_slots))
        throw Error(LLMK_ERR_INVALID_ARGUMENT, "slot_mapping[" + std::to_string(t) + "] = " +
                                                   std::to_string(a.slot_mapping[t]) + " is past the cache's " +
                                                   std::to_string(a.kv.num_slots) + " slots");
    for (uint32_t s = 0; s < a.num_seqs; ++s) {
      const int32_t num_new = a.query_start[s + 1] - a.query_start[s];
      const int64_t ctx = a.context_lens[s];
      if (num_new < 0 || ctx < num_new)
        throw Error(LLMK_ERR_INVALID_ARGUMENT, "sequence " + std::to_string(s) + ": context_len " +
                                                   std::to_string(ctx) + " is shorter than its " +
                                                   std::to_string(num_new) + " new tokens");
      const int64_t num_blocks = (ctx + a.block_size - 1) / a.block_size;
      if (num_blocks > a.max_blocks_per_seq)
        throw Error(LLMK_ERR_INVALID_ARGUMENT, "sequence " + std::to_string(s) + " needs " +
                                                   std::to_string(num_blocks) + " blocks, table has " +
                                                   std::to_string(a.max_blocks_per_seq));
      const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
      for (int64_t b = 0; b < num_blocks; ++b) {
        const int64_t used = std::min<int64_t>(a.block_size, ctx - b * a.block_size);
        if (table[b] < 0 || table[b] + used > static_cast<int64_t>(a.kv.num_slots))
          throw Error(LLMK_ERR_INVALID_ARGUMENT, "sequence " + std::to_string(s) + ": block " + std::to_string(b) +
                                                     " starts at slot " + std::to_string(table[b]) +
                                                     ", outside the cache's " + std::to_string(a.kv.num_slots) +
                                                     " slots");
      }
    }
  }

  // The first position a query at `pos` may see.
  int64_t first_visible(int64_t pos) const {
    return window_ == 0 ? 0 : std::max<int64_t>(0, pos - static_cast<int64_t>(window_) + 1);
  }

  void run_item(const llmk_attention_args& a, const WorkItem& item, Scratch& s) const {
    if (item.kv_head_end != 0) {
      const int64_t row = item.first_token;
      const DecodeQuery dq{a.q + row * num_heads_ * shape_.head_dim,
                           a.out + row * num_heads_ * shape_.head_dim,
                           a.block_tables + static_cast<int64_t>(item.seq) * a.max_blocks_per_seq,
                           a.block_size,
                           first_visible(a.context_lens[item.seq] - 1),
                           a.context_lens[item.seq],
                           item.kv_head,
                           item.kv_head_end,
                           group_,
                           scale_};
      attend_decode(a.kv, shape_, dq, s.decode);
      return;
    }
    const int64_t head_dim = shape_.head_dim;
    const int32_t seq_begin = a.query_start[item.seq];
    const int64_t num_new = a.query_start[item.seq + 1] - seq_begin;
    const int64_t first_pos = a.context_lens[item.seq] - num_new;  // position of the sequence's first new token
    const int num_rows = item.num_tokens * static_cast<int>(group_);
    for (int t = 0; t < item.num_tokens; ++t) {
      const int64_t row = item.first_token + t;
      for (uint32_t g = 0; g < group_; ++g) {
        const int r = t * static_cast<int>(group_) + static_cast<int>(g);
        const int64_t head = static_cast<int64_t>(item.kv_head) * group_ + g;
        s.q_rows[r] = a.q + (row * num_heads_ + head) * head_dim;
        s.out_rows[r] = a.out + (row * num_heads_ + head) * head_dim;
        s.last_key[r] = first_pos + (row - seq_begin);
        s.low_key[r] = first_visible(s.last_key[r]);
        s.m[r] = -std::numeric_limits<float>::infinity();
        s.l[r] = 0.0f;
      }
    }
    std::fill(s.acc.begin(), s.acc.begin() + num_rows * head_dim, 0.0f);
    const RowsState state{s.m.data(), s.l.data(), s.acc.data()};
    const int32_t* table = a.block_tables + static_cast<int64_t>(item.seq) * a.max_blocks_per_seq;
    // Rows are in position order: the first row sees the lowest keys, the last the highest.
    const int64_t num_keys = s.last_key[num_rows - 1] + 1;
    // Four or more rows (prefill blocks, GQA decode groups): the tiled kernel
    // (two small GEMMs per chunk), measured 2-4x faster there; fewer rows
    // (multi-head decode): one dot product per (row, key), no transposition.
    const bool tiled = num_rows >= kTileMinRows && !s.k_t.empty();
    for (int64_t first = s.low_key[0]; first < num_keys; first += kChunk) {
      const int count = static_cast<int>(std::min<int64_t>(kChunk, num_keys - first));
      read_kv(a.kv, shape_, table, a.block_size, item.kv_head, first, count, s.k_rows.data(), s.v_rows.data(),
              s.k_buf.data(), s.v_buf.data());
      if (tiled)
        attend_chunk_tiled(s.q_rows.data(), s.low_key.data(), s.last_key.data(), num_rows, s.k_rows.data(),
                           s.v_rows.data(), first, count, static_cast<int>(head_dim), scale_, s.scores.data(), state,
                           s.k_t.data(), s.alpha.data());
      else
        attend_chunk(s.q_rows.data(), s.low_key.data(), s.last_key.data(), num_rows, s.k_rows.data(), s.v_rows.data(),
                     first, count, static_cast<int>(head_dim), scale_, s.scores.data(), state);
    }
    finish_rows(state, num_rows, static_cast<int>(head_dim), s.out_rows.data());
  }

  uint32_t num_heads_;
  uint32_t group_;
  float scale_;
  uint32_t window_;  // 0: whole context; else keys (p - window_, p] for a query at p
  uint32_t num_threads_;
  KvShape shape_;
  bool decode_kernel_ = false;
  int tokens_per_item_ = 1;
  std::vector<Scratch> scratch_;
  std::vector<WorkItem> items_, decode_items_;
};

}  // namespace llmk::attention_cpu

LLMK_EXPORT_ATTENTION_PLUGIN(llmk::attention_cpu::AttentionCpu)
