// core/cuda/step_metadata: which steps a CUDA graph replays and how they are
// padded to their bucket, and the one buffer the step's arrays go up in
// (every array at its own 64-byte aligned offset, holding the batch's values).
#include <cstdint>
#include <utility>
#include <vector>

#include "core/cuda/step_metadata.hpp"
#include "test_support.hpp"

namespace {

using namespace llmk;

// `n` sequences decoding one token each: sequence s at position 10 + s,
// slot 100 + s, two blocks of 16 (first slots 32 * s and 32 * s + 16).
StepBatch decodes(int32_t n) {
  StepBatch b;
  b.block_size = 16;
  b.max_blocks_per_seq = 2;
  b.query_start.push_back(0);
  for (int32_t s = 0; s < n; ++s) {
    b.token_ids.push_back(5 + s);
    b.positions.push_back(10 + s);
    b.slot_mapping.push_back(100 + s);
    b.context_lens.push_back(11 + s);
    b.query_start.push_back(s + 1);
    b.block_tables.push_back(32 * s);
    b.block_tables.push_back(32 * s + 16);
    b.logits_rows.push_back(s);
  }
  return b;
}

}  // namespace

TEST_CASE("A decode-only step is replayed in the smallest bucket that holds it, other steps run eagerly") {
  CHECK(graph_bucket(decodes(1), 64) == 1);
  CHECK(graph_bucket(decodes(2), 64) == 2);
  CHECK(graph_bucket(decodes(3), 64) == 4);
  CHECK(graph_bucket(decodes(5), 64) == 8);
  CHECK(graph_bucket(decodes(9), 64) == 16);
  CHECK(graph_bucket(decodes(17), 64) == 24);
  CHECK(graph_bucket(decodes(9), 12) == 0);  // the bucket would exceed max_step_tokens

  StepBatch prefill = decodes(2);  // sequence 0 feeds two tokens
  prefill.token_ids.insert(prefill.token_ids.begin(), 4);
  prefill.positions.insert(prefill.positions.begin(), 9);
  prefill.slot_mapping.insert(prefill.slot_mapping.begin(), 99);
  prefill.query_start = {0, 2, 3};
  prefill.logits_rows = {1, 2};
  CHECK(graph_bucket(prefill, 64) == 0);

  StepBatch reordered = decodes(3);
  reordered.logits_rows = {1, 0, 2};
  CHECK(graph_bucket(reordered, 64) == 0);

  StepBatch no_logits = decodes(3);
  no_logits.logits_rows = {0, 1};
  CHECK(graph_bucket(no_logits, 64) == 0);
}

TEST_CASE("A padded decode step keeps its rows and adds rows that store nothing and read one slot") {
  const StepBatch b = decodes(3);
  const StepBatch p = padded_step(b, 4, 100);  // 100 tokens in blocks of 16: 7 blocks a sequence
  REQUIRE(p.num_tokens() == 4);
  REQUIRE(p.num_seqs() == 4);
  CHECK(p.block_size == 16);
  CHECK(p.max_blocks_per_seq == 7);
  CHECK(p.token_ids == std::vector<int32_t>{5, 6, 7, 0});
  CHECK(p.positions == std::vector<int32_t>{10, 11, 12, 0});
  CHECK(p.slot_mapping == std::vector<int32_t>{100, 101, 102, -1});
  CHECK(p.context_lens == std::vector<int32_t>{11, 12, 13, 1});
  CHECK(p.query_start == std::vector<int32_t>{0, 1, 2, 3, 4});
  CHECK(p.logits_rows == std::vector<int32_t>{0, 1, 2, 3});
  REQUIRE(p.block_tables.size() == 4u * 7u);
  for (int32_t s = 0; s < 4; ++s)
    for (int32_t j = 0; j < 7; ++j) {
      INFO("sequence " << s << " block " << j);
      const int32_t want = s < 3 && j < 2 ? b.block_tables[static_cast<size_t>(s * 2 + j)] : 0;
      CHECK(p.block_tables[static_cast<size_t>(s * 7 + j)] == want);
    }
}

TEST_CASE("A step's arrays go into one buffer, each at a 64-byte aligned offset of its own") {
  StepBatch b = decodes(3);
  b.fed_back = {{1, 4}, {2, 0}};
  const MetaLayout m = meta_layout(b);
  const std::vector<std::pair<size_t, size_t>> arrays = {
      {m.token_ids, b.token_ids.size()},       {m.positions, b.positions.size()},
      {m.cache_positions, b.positions.size()},
      {m.query_start, b.query_start.size()},   {m.context_lens, b.context_lens.size()},
      {m.slot_mapping, b.slot_mapping.size()}, {m.block_tables, b.block_tables.size()},
      {m.logits_rows, b.logits_rows.size()},   {m.fed_back_rows, b.fed_back.size()},
      {m.fed_back_previous, b.fed_back.size()}};
  size_t end = 0;
  for (const auto& [offset, size] : arrays) {
    CHECK(offset % 16 == 0);  // int32s: 64 bytes
    CHECK(offset >= end);     // no overlap with the array before
    end = offset + size;
  }
  CHECK(m.total >= end);
  CHECK(m.total % 16 == 0);

  MetaBuffers buffers;
  stage_meta(b, buffers);
  REQUIRE(buffers.host.bytes() >= m.total * sizeof(int32_t));
  REQUIRE(buffers.device.bytes() == buffers.host.bytes());
  const int32_t* host = buffers.host.as<int32_t>();
  auto staged = [&](size_t offset, size_t size) { return std::vector<int32_t>(host + offset, host + offset + size); };
  CHECK(staged(m.token_ids, 3) == b.token_ids);
  CHECK(staged(m.positions, 3) == b.positions);
  CHECK(staged(m.query_start, 4) == b.query_start);
  CHECK(staged(m.context_lens, 3) == b.context_lens);
  CHECK(staged(m.slot_mapping, 3) == b.slot_mapping);
  CHECK(staged(m.block_tables, 6) == b.block_tables);
  CHECK(staged(m.logits_rows, 3) == b.logits_rows);
  CHECK(staged(m.fed_back_rows, 2) == std::vector<int32_t>{1, 2});
  CHECK(staged(m.fed_back_previous, 2) == std::vector<int32_t>{4, 0});

  // A smaller step reuses the buffers; a larger one replaces them.
  const void* first = buffers.host.data();
  stage_meta(decodes(1), buffers);
  CHECK(buffers.host.data() == first);
  stage_meta(decodes(40), buffers);
  CHECK(buffers.host.bytes() >= meta_layout(decodes(40)).total * sizeof(int32_t));
}

TEST_CASE("Each row's cache position is its sequence's context length less the rows from it on, whatever its "
          "text position") {
  // A shifted prefill chunk (text 40..42, cache 17..19), a shifted decode
  // (text 100, cache 29) and one not shifted (text and cache 5).
  StepBatch b;
  b.token_ids = {1, 2, 3, 4, 5};
  b.positions = {40, 41, 42, 100, 5};
  b.slot_mapping = {17, 18, 19, 93, 133};
  b.query_start = {0, 3, 4, 5};
  b.context_lens = {20, 30, 6};
  b.block_size = 64;
  b.max_blocks_per_seq = 1;
  b.block_tables = {0, 64, 128};
  b.logits_rows = {2, 3, 4};
  MetaBuffers buffers;
  stage_meta(b, buffers);
  const int32_t* staged = buffers.host.as<int32_t>() + buffers.layout.cache_positions;
  CHECK(std::vector<int32_t>(staged, staged + 5) == std::vector<int32_t>{17, 18, 19, 29, 5});
}
