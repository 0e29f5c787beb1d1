#include "core/cuda/step_metadata.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace llmk {

MetaLayout meta_layout(const StepBatch& b) {
  MetaLayout m{};
  size_t at = 0;
  auto take = [&](size_t n) {
    const size_t here = at;
    at += (n + 15) / 16 * 16;  // 64-byte aligned arrays
    return here;
  };
  m.token_ids = take(b.token_ids.size());
  m.positions = take(b.positions.size());
  m.cache_positions = take(b.positions.size());
  m.query_start = take(b.query_start.size());
  m.context_lens = take(b.context_lens.size());
  m.slot_mapping = take(b.slot_mapping.size());
  m.block_tables = take(b.block_tables.size());
  m.logits_rows = take(b.logits_rows.size());
  m.fed_back_rows = take(b.fed_back.size());
  m.fed_back_previous = take(b.fed_back.size());
  m.tree_parents = take(b.tree_parents.size());
  m.total = at;
  return m;
}

void stage_meta(const StepBatch& b, MetaBuffers& m) {
  m.layout = meta_layout(b);
  const size_t bytes = m.layout.total * sizeof(int32_t);
  if (bytes > m.host.bytes()) {
    m.host = pinned_buffer(bytes);
    m.device = device_buffer(bytes, "the step's metadata");
  }
  auto* host = m.host.as<int32_t>();
  auto put = [&](size_t at, const std::vector<int32_t>& v) {
    if (!v.empty()) std::memcpy(host + at, v.data(), v.size() * sizeof(int32_t));
  };
  put(m.layout.token_ids, b.token_ids);
  put(m.layout.positions, b.positions);
  for (int32_t s = 0; s < b.num_seqs(); ++s) {
    const int32_t end = b.query_start[s + 1];
    for (int32_t t = b.query_start[s]; t < end; ++t) host[m.layout.cache_positions + t] = b.context_lens[s] - (end - t);
  }
  put(m.layout.query_start, b.query_start);
  put(m.layout.context_lens, b.context_lens);
  put(m.layout.slot_mapping, b.slot_mapping);
  put(m.layout.block_tables, b.block_tables);
  put(m.layout.logits_rows, b.logits_rows);
  put(m.layout.tree_parents, b.tree_parents);
  for (size_t i = 0; i < b.fed_back.size(); ++i) {
    host[m.layout.fed_back_rows + i] = b.fed_back[i].row;
    host[m.layout.fed_back_previous + i] = b.fed_back[i].previous_row;
  }
}

int32_t graph_bucket(const StepBatch& b, uint32_t max_step_tokens) {
  const int32_t n = b.num_tokens();
  if (b.num_seqs() != n || b.num_logits() != n) return 0;
  for (int32_t i = 0; i < n; ++i)
    if (b.logits_rows[i] != i || b.query_start[i + 1] != i + 1) return 0;
  const int32_t bucket = n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : n <= 8 ? 8 : (n + 7) / 8 * 8;
  return bucket <= static_cast<int32_t>(max_step_tokens) ? bucket : 0;
}

StepBatch padded_step(const StepBatch& b, int32_t bucket, uint32_t max_seq_len) {
  const int32_t n = b.num_tokens();
  const int32_t width = static_cast<int32_t>((max_seq_len + b.block_size - 1) / b.block_size);
  StepBatch p;
  p.block_size = b.block_size;
  p.max_blocks_per_seq = std::max(width, b.max_blocks_per_seq);
  p.token_ids = b.token_ids;
  p.positions = b.positions;
  p.slot_mapping = b.slot_mapping;
  p.context_lens = b.context_lens;
  p.query_start = b.query_start;
  p.logits_rows = b.logits_rows;
  p.fed_back = b.fed_back;
  p.block_tables.assign(static_cast<size_t>(bucket) * p.max_blocks_per_seq, 0);
  for (int32_t s = 0; s < n; ++s)
    std::copy_n(b.block_tables.begin() + static_cast<int64_t>(s) * b.max_blocks_per_seq, b.max_blocks_per_seq,
                p.block_tables.begin() + static_cast<int64_t>(s) * p.max_blocks_per_seq);
  for (int32_t s = n; s < bucket; ++s) {
    p.token_ids.push_back(0);
    p.positions.push_back(0);
    p.slot_mapping.push_back(-1);  // nothing stored
    p.context_lens.push_back(1);   // reads slot 0, whatever it holds; the row is ignored
    p.query_start.push_back(s + 1);
    p.logits_rows.push_back(s);
  }
  return p;
}

}  // namespace llmk
