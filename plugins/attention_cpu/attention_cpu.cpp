// attention.cpu: causal GQA attention over a paged KV cache on CPU threads,
// with an optional sliding window (each query row and each decode starts its
// keys at the window's first position; the rest of the cache is not read)
// and optional attention sinks (API 3.2: the first sink_tokens cache
// positions, always visible, scored with the layer's q_sink rows in a pass
// of their own before the other keys; a decode's sinks are a span of their
// own, merged with the rest as long contexts' spans are).
//
// plan() (once per step) checks the step's metadata against the cache and
// splits the batch into work items (sequence, KV head, block of query
// tokens); run() (once per layer) writes the new K/V at slot_mapping and
// spreads the items over OpenMP threads, each thread's scratch carved from
// the caller's workspace. An item gathers the query rows of every query head
// that shares the KV head (K/V are read once per group, never repeated in
// memory) and streams the visible context through attend_chunk in chunks of
// kChunk keys with an online softmax. A prefill chunk is cut into blocks of
// query tokens so that both threads get work; items with many rows use the
// register-tiled kernel (attend_tile.hpp), others the row-by-row one
// (attend_chunk.hpp). A decode (one new token) is an item of its sequence,
// a span of its context (the whole of it up to kDecodeSpansFrom visible
// positions; longer ones are cut at multiples of kDecodeSpan and the spans'
// softmax states merged after the items) and a range of KV heads (all of
// them when there are enough items to keep every thread busy, or spans for
// every thread), served by the decode kernel (attend_decode.hpp), which reads
// each cached slot's rows for the whole range in one pass, and whole rows in
// address order. Where a span ends depends on the position alone, so a
// sequence's output is the same bits whatever runs beside it and on however
// many threads.
//
// Token trees (API 3.3): a sequence whose new tokens form a tree is cut into
// query blocks as a prefill chunk is; its rows first see the cached context
// together (per row from its own window start), then each new token's key in
// turn joins the rows it is an ancestor of (or is), one key at a time.
//
// This plugin reads llmk_attention_step.tree_parents, so it claims 3.3.
#define LLMK_ATTENTION_API_BUILD_MINOR 3u
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "plugins/api/plugin_helpers.hpp"
#include "plugins/attention_common/step_checks.hpp"
#include "plugins/attention_cpu/attend_chunk.hpp"
#include "plugins/attention_cpu/attend_decode.hpp"
#include "plugins/attention_cpu/attend_tile.hpp"
#include "plugins/attention_cpu/kv_rows.hpp"
#include "plugins/attention_cpu/work_items.hpp"

namespace llmk::attention_cpu {

using plugin::Error;

class AttentionCpu {
 public:
  static constexpr const char* kName = "attention.cpu";
  static constexpr const char* kVersion = "1.6.0";
  static constexpr const char* kDescription =
      "CPU causal GQA attention over a paged KV cache (online softmax, OpenMP), F32, F16 or I8 group-quantized KV";
  static constexpr const char* kCapabilities =
      R"({"kv_dtypes":["f32","f16","i8"],"devices":["cpu"],"activation_dtypes":["f32"],"paged":true,"gqa":true,"sliding_window":true,"attention_sinks":true,"token_trees":true})";

  static bool supports(const llmk_attention_desc& d, std::string& why) {
    if (d.device != LLMK_DEVICE_CPU) {
      why = "this plugin runs on the CPU, the desc names " + plugin::device_text(d.device);
      return false;
    }
    if (d.activation_dtype != LLMK_DTYPE_F32) {
      why = "activation dtype " + std::to_string(d.activation_dtype) + " is not f32";
      return false;
    }
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
        sinks_(d.struct_size >= offsetof(llmk_attention_desc, sink_tokens) + sizeof(uint32_t) ? d.sink_tokens : 0),
        num_threads_(std::max<uint32_t>(1, d.num_threads)) {
    std::string why;
    if (!supports(d, why)) throw Error(LLMK_ERR_UNSUPPORTED, why);
    shape_.num_kv_heads = d.num_kv_heads;
    shape_.head_dim = d.head_dim;
    shape_.int8 = d.kv_dtype == LLMK_DTYPE_I8;
    shape_.f16 = d.kv_dtype == LLMK_DTYPE_F16;
    shape_.group_size = shape_.int8 ? d.kv_group_size : 0;
    decode_kernel_ = decode_supports(static_cast<int>(d.head_dim));
    tiled_kernel_ = tile_supports(static_cast<int>(d.head_dim));
    tokens_per_item_ = std::max<int>(1, kRowsPerItem / static_cast<int>(group_));
    Carver measure(nullptr);
    carve(measure);
    thread_bytes_ = measure.offset();
    // Room for the items of every step without long decodes; a step with
    // more spans than any before grows the lists once (they keep their capacity).
    const size_t max_tokens = std::max<uint32_t>(1, d.max_tokens), max_seqs = std::max<uint32_t>(1, d.max_seqs);
    items_.reserve((max_tokens + max_seqs * tokens_per_item_) / tokens_per_item_ * shape_.num_kv_heads +
                   max_seqs * shape_.num_kv_heads);
    decode_items_.reserve(max_seqs * shape_.num_kv_heads);
    merges_.reserve(max_seqs);
  }

  void kv_layout(llmk_kv_layout& layout) const {
    const uint64_t elems = static_cast<uint64_t>(shape_.num_kv_heads) * shape_.head_dim;
    const uint64_t elem_bytes = shape_.int8 ? 1 : shape_.f16 ? 2 : 4;
    layout.kind = LLMK_KV_LAYOUT_STANDARD;
    layout.alignment = kAlign;
    layout.k_bytes_per_slot = layout.v_bytes_per_slot = elems * elem_bytes;
    layout.k_scale_bytes_per_slot = layout.v_scale_bytes_per_slot =
        shape_.int8 ? elems / shape_.group_size * sizeof(float) : 0;
  }

  size_t plan(const llmk_attention_step& step) {
    validate(step);
    step_ = step;
    planned_ = true;
    tree_parents_ = tree_parents(step);
    if (tree_parents_ != nullptr) depths_.assign(step.num_tokens, 0);
    items_.clear();
    decode_items_.clear();
    merges_.clear();
    span_floats_ = 0;
    // Decodes: a long context is cut into spans, each an item with its own
    // softmax state, merged after the items; the KV heads are split too where
    // there are too few items to give every thread a few.
    uint32_t num_decodes = 0;
    for (uint32_t s = 0; s < step.num_seqs; ++s) num_decodes += step.query_start[s + 1] - step.query_start[s] == 1;
    const uint32_t parts = num_decodes == 0 ? 1 : (4 * num_threads_ + num_decodes - 1) / num_decodes;
    const size_t span_size = decode_span_floats(num_heads_, shape_.head_dim);
    for (uint32_t s = 0; s < step.num_seqs; ++s) {
      const int32_t begin = step.query_start[s], end = step.query_start[s + 1];
      if (end <= begin) continue;
      const bool tree = is_tree(begin, end);
      if (end - begin == 1 && decode_kernel_) {
        // Sinks [0, sink_end) are one span; the rest of the visible context
        // starts after them.
        const int64_t context = step.context_lens[s], sink_end = std::min<int64_t>(sinks_, context);
        const int64_t first = std::max(first_visible(context - 1), sink_end);
        int64_t rest_spans = first < context ? 1 : 0;
        if (context - first > kDecodeSpansFrom) rest_spans = (context - 1) / kDecodeSpan - first / kDecodeSpan + 1;
        const int64_t num_spans = rest_spans + (sink_end > 0 ? 1 : 0);
        // Spans enough for every thread: each keeps whole rows (every KV
        // head), which the decode kernel reads in address order.
        const uint32_t head_parts =
            num_spans >= static_cast<int64_t>(num_threads_)
                ? 1u
                : std::clamp<uint32_t>(static_cast<uint32_t>((parts + num_spans - 1) / num_spans), 1,
                                       shape_.num_kv_heads);
        const uint32_t heads_per_part = (shape_.num_kv_heads + head_parts - 1) / head_parts;
        if (num_spans > 1)
          merges_.push_back({begin, static_cast<int32_t>(num_spans), static_cast<int64_t>(span_floats_)});
        auto add_span = [&](int64_t p0, int64_t p1, bool sinks) {
          const int64_t state = num_spans > 1 ? static_cast<int64_t>(span_floats_) : -1;
          for (uint32_t h = 0; h < shape_.num_kv_heads; h += heads_per_part)
            decode_items_.push_back(
                {s, h, begin, 1, std::min(h + heads_per_part, shape_.num_kv_heads), p0, p1, state, sinks});
          if (num_spans > 1) span_floats_ += span_size;
        };
        if (sink_end > 0) add_span(0, sink_end, true);
        for (int64_t p0 = first, p1; p0 < context; p0 = p1) {
          p1 = rest_spans > 1 ? std::min(context, (p0 / kDecodeSpan + 1) * kDecodeSpan) : context;
          add_span(p0, p1, false);
        }
        continue;
      }
      // Later query blocks see more keys: list them first so they start first.
      for (int32_t t = begin + ((end - begin - 1) / tokens_per_item_) * tokens_per_item_; t >= begin;
           t -= tokens_per_item_)
        for (uint32_t h = 0; h < shape_.num_kv_heads; ++h)
          items_.push_back({s, h, t, std::min(tokens_per_item_, end - t), 0, 0, 0, -1, false, tree});
    }
    // Prefill blocks first: the many small decode items then fill the gaps.
    items_.insert(items_.end(), decode_items_.begin(), decode_items_.end());
    // Threads only when the work pays for waking them: query rows x keys x
    // head_dim x heads of 2^14 or more. A decode step's keys come from memory
    // (the weights streamed since evicted them): llama-110m batch-1 decode at
    // 16-80 positions spent 0.42 ms a step in attention on one thread, 0.17-0.22
    // on two (2-core Zen 3; 2^18 had kept it on one thread below 341 positions).
    int64_t work = 0;
    for (uint32_t s = 0; s < step.num_seqs; ++s)
      work += static_cast<int64_t>(step.query_start[s + 1] - step.query_start[s]) * step.context_lens[s];
    work *= static_cast<int64_t>(num_heads_) * shape_.head_dim;
    threads_ = work < (1 << 14) ? 1 : static_cast<int>(std::min<int64_t>(num_threads_, items_.size()));
    threads_ = std::max(threads_, 1);
    return workspace_bytes();
  }

  void run(const llmk_attention_layer& layer, void* workspace, size_t workspace_size, void* /*stream*/) {
    if (!planned_) throw Error(LLMK_ERR_INVALID_ARGUMENT, "run() before any plan()");
    if (workspace_size < workspace_bytes() || workspace == nullptr)
      throw Error(LLMK_ERR_INVALID_ARGUMENT, "the step needs a " + std::to_string(workspace_bytes()) +
                                                 "-byte workspace, got " + std::to_string(workspace_size));
    if (layer.kv.num_slots != step_.num_slots)
      throw Error(LLMK_ERR_INVALID_ARGUMENT, "the layer's cache has " + std::to_string(layer.kv.num_slots) +
                                                 " slots, the step was planned for " +
                                                 std::to_string(step_.num_slots));
    const auto* q = static_cast<const float*>(layer.q);
    const bool has_q_sink = layer.struct_size >= offsetof(llmk_attention_layer, q_sink) + sizeof(void*) &&
                            layer.q_sink != nullptr;
    const auto* q_sink = has_q_sink ? static_cast<const float*>(layer.q_sink) : q;
    auto* out = static_cast<float*>(layer.out);
    write_kv(layer.kv, shape_, static_cast<const float*>(layer.k), static_cast<const float*>(layer.v),
             step_.device_slot_mapping, step_.num_tokens, static_cast<int>(num_threads_));
    const int64_t num_items = static_cast<int64_t>(items_.size());
    const int64_t num_merges = static_cast<int64_t>(merges_.size());
    auto* base = static_cast<unsigned char*>(workspace);
    float* spans = reinterpret_cast<float*>(base + static_cast<size_t>(threads_) * thread_bytes_);
    const size_t head_dim = shape_.head_dim;
#pragma omp parallel num_threads(threads_) if (threads_ > 1)
    {
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = 0; i < num_items; ++i) {
        Carver carver(base + static_cast<size_t>(omp_get_thread_num()) * thread_bytes_);
        const Scratch s = carve(carver);
        run_item(layer.kv, q, q_sink, out, items_[i], s, spans);
      }
#pragma omp for schedule(static)
      for (int64_t i = 0; i < num_merges; ++i) {
        const SpanMerge& mg = merges_[i];
        merge_decode_spans(spans + mg.first_span, mg.num_spans, num_heads_, static_cast<uint32_t>(head_dim),
                           out + static_cast<int64_t>(mg.row) * num_heads_ * head_dim);
      }
    }
  }

 private:
  size_t workspace_bytes() const {
    const size_t span_bytes = (span_floats_ * sizeof(float) + kAlign - 1) / kAlign * kAlign;
    return static_cast<size_t>(threads_) * thread_bytes_ + span_bytes;
  }

  // One thread's arrays, in a fixed order (measured once at creation, then
  // carved from the workspace on every run).
  Scratch carve(Carver& c) const {
    const size_t rows = static_cast<size_t>(tokens_per_item_) * group_, hd = shape_.head_dim;
    Scratch s{};
    s.q_rows = c.take<const float*>(rows);
    s.out_rows = c.take<float*>(rows);
    s.k_rows = c.take<const float*>(kChunk);
    s.v_rows = c.take<const float*>(kChunk);
    s.low_key = c.take<int64_t>(rows);
    s.last_key = c.take<int64_t>(rows);
    s.scores = c.take<float>(rows * kChunk);
    s.m = c.take<float>(rows);
    s.l = c.take<float>(rows);
    s.acc = c.take<float>(rows * hd);
    s.alpha = c.take<float>(rows);
    s.k_t = tiled_kernel_ ? c.take<float>(hd * kTileKeys) : nullptr;
    if (shape_.converted()) {
      s.k_buf = c.take<float>(static_cast<size_t>(kChunk) * hd);
      s.v_buf = c.take<float>(static_cast<size_t>(kChunk) * hd);
    }
    if (decode_kernel_) {
      const DecodeScratchSize d = decode_scratch_size(shape_, num_heads_);
      s.decode.m = c.take<float>(d.per_head);
      s.decode.l = c.take<float>(d.per_head);
      s.decode.acc = c.take<float>(d.acc);
      s.decode.k_buf = c.take<float>(d.tile);
      s.decode.v_buf = c.take<float>(d.tile);
      s.decode.part = c.take<float>(d.part);
      s.decode.p = c.take<float>(d.p);
      s.decode.alpha = c.take<float>(d.per_head);
    }
    return s;
  }

  void validate(const llmk_attention_step& a) const {
    attention_common::check_step(a);
    const bool host_is_device = a.device_query_start == a.query_start && a.device_context_lens == a.context_lens &&
                                a.device_slot_mapping == a.slot_mapping && a.device_block_tables == a.block_tables;
    if (!host_is_device)
      throw Error(LLMK_ERR_INVALID_ARGUMENT, "on the CPU the step's device arrays must be its host arrays");
    const int32_t* parents = attention_common::tree_parents(a);
    if (parents == nullptr) return;
    if (a.device_tree_parents != parents)
      throw Error(LLMK_ERR_INVALID_ARGUMENT, "on the CPU the step's device_tree_parents must be its tree_parents");
    attention_common::check_tree_parents(a);
  }

  static const int32_t* tree_parents(const llmk_attention_step& a) { return attention_common::tree_parents(a); }

  // Whether the sequence's new tokens [begin, end) are a tree other than the
  // causal chain; fills their depths (ancestors among the new tokens).
  bool is_tree(int32_t begin, int32_t end) {
    if (tree_parents_ == nullptr) return false;
    bool chain = true;
    for (int32_t t = begin; t < end; ++t) {
      const int32_t parent = tree_parents_[t];
      chain = chain && parent == t - begin - 1;
      depths_[t] = parent < 0 ? 0 : depths_[begin + parent] + 1;
    }
    return !chain;
  }

  // The first position a query at `pos` may see.
  int64_t first_visible(int64_t pos) const {
    return window_ == 0 ? 0 : std::max<int64_t>(0, pos - static_cast<int64_t>(window_) + 1);
  }

  void run_item(const llmk_kv_layer& kv, const float* q, const float* q_sink, float* out, const WorkItem& item,
                const Scratch& s, float* spans) const {
    const llmk_attention_step& a = step_;
    const int32_t* table = a.device_block_tables + static_cast<int64_t>(item.seq) * a.max_blocks_per_seq;
    if (item.kv_head_end != 0) {
      const int64_t row = item.first_token;
      const DecodeQuery dq{(item.sinks ? q_sink : q) + row * num_heads_ * shape_.head_dim,
                           item.span < 0 ? out + row * num_heads_ * shape_.head_dim : nullptr,
                           table,
                           a.block_size,
                           item.pos_begin,
                           item.pos_end,
                           item.kv_head,
                           item.kv_head_end,
                           group_,
                           scale_};
      DecodeScratch decode = s.decode;
      if (item.span >= 0) {  // the span's state, this item's heads of it
        float* span = spans + item.span;
        const size_t first_head = static_cast<size_t>(item.kv_head) * group_;
        decode.m = span + first_head;
        decode.l = span + num_heads_ + first_head;
        decode.acc = span + 2 * static_cast<size_t>(num_heads_) + first_head * shape_.head_dim;
      }
      attend_decode(kv, shape_, dq, decode);
      return;
    }
    const int64_t head_dim = shape_.head_dim;
    const int32_t seq_begin = a.device_query_start[item.seq];
    const int64_t num_new = a.device_query_start[item.seq + 1] - seq_begin;
    const int64_t first_pos = a.device_context_lens[item.seq] - num_new;  // position of the sequence's first new token
    const int num_rows = item.num_tokens * static_cast<int>(group_);
    // A row's place in the text: its cache position, or in a tree the cached
    // length plus its depth; the window counts from it.
    auto text_position = [&](int64_t row) { return first_pos + (item.tree ? depths_[row] : row - seq_begin); };
    for (int t = 0; t < item.num_tokens; ++t) {
      const int64_t row = item.first_token + t;
      for (uint32_t g = 0; g < group_; ++g) {
        const int r = t * static_cast<int>(group_) + static_cast<int>(g);
        const int64_t head = static_cast<int64_t>(item.kv_head) * group_ + g;
        s.q_rows[r] = q + (row * num_heads_ + head) * head_dim;
        s.out_rows[r] = out + (row * num_heads_ + head) * head_dim;
        // A tree's rows see the cached context first; their new keys later.
        s.last_key[r] = item.tree ? first_pos - 1 : first_pos + (row - seq_begin);
        s.low_key[r] = first_visible(text_position(row));
        s.m[r] = -std::numeric_limits<float>::infinity();
        s.l[r] = 0.0f;
      }
    }
    std::fill_n(s.acc, num_rows * head_dim, 0.0f);
    const RowsState state{s.m, s.l, s.acc};
    // Rows are in position order: the first row sees the lowest keys, the last the highest.
    const int64_t num_keys = s.last_key[num_rows - 1] + 1;
    // Four or more rows (prefill blocks, GQA decode groups): the tiled kernel
    // (two small GEMMs per chunk), measured 2-4x faster there; fewer rows
    // (multi-head decode): one dot product per (row, key), no transposition.
    const bool tiled = num_rows >= kTileMinRows && s.k_t != nullptr;
    auto attend_keys = [&](int64_t begin_key, int64_t end_key, bool rowwise) {
      for (int64_t first = begin_key; first < end_key; first += kChunk) {
        const int count = static_cast<int>(std::min<int64_t>(kChunk, end_key - first));
        read_kv(kv, shape_, table, a.block_size, item.kv_head, first, count, s.k_rows, s.v_rows, s.k_buf, s.v_buf);
        if (tiled && !rowwise)
          attend_chunk_tiled(s.q_rows, s.low_key, s.last_key, num_rows, s.k_rows, s.v_rows, first, count,
                             static_cast<int>(head_dim), scale_, s.scores, state, s.k_t, s.alpha);
        else
          attend_chunk(s.q_rows, s.low_key, s.last_key, num_rows, s.k_rows, s.v_rows, first, count,
                       static_cast<int>(head_dim), scale_, s.scores, state);
      }
    };
    const int64_t sink_end = std::min<int64_t>(sinks_, num_keys);
    if (sink_end > 0) {
      // The sinks first, seen by every row (up to its own position) through
      // its q_sink row; then the other keys from the window's start on.
      for (int r = 0; r < num_rows; ++r) {
        const int64_t at = s.q_rows[r] - q;
        s.q_rows[r] = q_sink + at;
        s.low_key[r] = 0;
      }
      attend_keys(0, sink_end, false);
      for (int r = 0; r < num_rows; ++r) {
        s.q_rows[r] = q + (s.q_rows[r] - q_sink);
        s.low_key[r] = std::max(first_visible(text_position(item.first_token + r / group_)), sink_end);
      }
    }
    attend_keys(*std::min_element(s.low_key, s.low_key + num_rows), num_keys, false);
    if (item.tree) {
      // Each new token j (cache position first_pos + j) joins the rows that
      // descend from it or are it, where their window (or the sinks) reach it.
      const int32_t* parents = tree_parents_ + seq_begin;
      const int64_t last = item.first_token + item.num_tokens - 1 - seq_begin;
      for (int64_t j = 0; j <= last; ++j) {
        const int64_t key = first_pos + j;
        bool any = false;
        for (int r = 0; r < num_rows; ++r) {
          const int64_t row = item.first_token + r / static_cast<int>(group_);
          const int64_t head = static_cast<int64_t>(item.kv_head) * group_ + r % static_cast<int>(group_);
          int64_t x = row - seq_begin;  // the row's ancestor (or itself) at or below j
          while (x > j) x = parents[x];
          const bool sink = key < static_cast<int64_t>(sinks_);
          const bool seen = x == j && (sink || text_position(seq_begin + j) >= first_visible(text_position(row)));
          s.q_rows[r] = (sink ? q_sink : q) + (row * num_heads_ + head) * head_dim;
          s.low_key[r] = key;
          s.last_key[r] = seen ? key : key - 1;
          any = any || seen;
        }
        if (any) attend_keys(key, key + 1, true);
      }
    }
    finish_rows(state, num_rows, static_cast<int>(head_dim), s.out_rows);
  }

  uint32_t num_heads_;
  uint32_t group_;
  float scale_;
  uint32_t window_;  // 0: whole context; else keys (p - window_, p] for a query at p
  uint32_t sinks_;   // positions [0, sinks_) always visible, scored with q_sink (API 3.2)
  uint32_t num_threads_;
  KvShape shape_;
  bool decode_kernel_ = false;
  bool tiled_kernel_ = false;
  int tokens_per_item_ = 1;
  size_t thread_bytes_ = 0;  // one thread's scratch, 64-byte multiples
  // The current plan: the step's metadata, its work items and thread count.
  llmk_attention_step step_{};
  bool planned_ = false;
  int threads_ = 1;
  std::vector<WorkItem> items_, decode_items_;
  std::vector<SpanMerge> merges_;  // decodes cut into spans
  const int32_t* tree_parents_ = nullptr;  // the step's (API 3.3); null: every sequence causal
  std::vector<int32_t> depths_;            // with tree_parents_: [num_tokens], ancestors among the new tokens
  size_t span_floats_ = 0;         // the partials area: every span state of the step
};

}  // namespace llmk::attention_cpu

LLMK_EXPORT_ATTENTION_PLUGIN(llmk::attention_cpu::AttentionCpu)
