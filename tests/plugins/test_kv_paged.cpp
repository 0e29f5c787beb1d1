// kv.paged scenarios: prefix caching, eviction, copy-on-write, waste.
#include <catch2/catch.hpp>

#include <numeric>

#include "support/kv_harness.hpp"
#include "plugins/kv_paged/paged_allocator.hpp"

using kvtest::Harness;
using Paged = kvtest::Direct<llmk::kv::PagedAllocator>;

namespace {

llmk_kv_allocator_desc paged_desc(uint32_t num_blocks, const char* options = "{}", bool prefix = true) {
  return llmk_kv_allocator_desc{sizeof(llmk_kv_allocator_desc), num_blocks * 8, 8, 256, prefix ? 1 : 0, options, nullptr, nullptr};
}

std::vector<int32_t> iota_tokens(uint32_t n, int32_t first) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("a repeated prompt reuses its full blocks from the prefix cache", "[kv][paged]") {
  Paged alloc(paged_desc(16));
  Harness h(alloc, kvtest::traits_of<llmk::kv::PagedAllocator>(), 16 * 8, true);
  const auto prompt = iota_tokens(20, 100);
  uint32_t cached = 0;
  REQUIRE(h.reserve(1, prompt, 64, &cached));
  CHECK(cached == 0);
  h.free(1);
  CHECK(alloc.usage().cached_free_slots == 16);  // its two full blocks
  REQUIRE(h.reserve(2, prompt, 64, &cached));
  CHECK(cached == 16);
  h.check();  // the hit blocks hold this prompt's K/V
  CHECK(alloc.usage().prefix_query_tokens == 40);
  CHECK(alloc.usage().prefix_hit_tokens == 16);
  CHECK(alloc.usage().cached_free_slots == 0);
  // A prompt sharing only the first block reuses only that one.
  auto other = prompt;
  other[9] = 7;
  REQUIRE(h.reserve(3, other, 64, &cached));
  CHECK(cached == 8);
  h.check();
}

TEST_CASE("a prompt of whole blocks still computes its last token", "[kv][paged]") {
  Paged alloc(paged_desc(8));
  Harness h(alloc, kvtest::traits_of<llmk::kv::PagedAllocator>(), 64, true);
  const auto prompt = iota_tokens(16, 0);
  uint32_t cached = 0;
  REQUIRE(h.reserve(1, prompt, 32, &cached));
  h.free(1);
  REQUIRE(h.reserve(2, prompt, 32, &cached));
  CHECK(cached == 8);  // not 16: the last token's logits must be computed
}

TEST_CASE("tokens generated before a preemption are found again when the sequence resumes", "[kv][paged]") {
  Paged alloc(paged_desc(8));
  Harness h(alloc, kvtest::traits_of<llmk::kv::PagedAllocator>(), 64, true);
  REQUIRE(h.reserve(1, iota_tokens(5, 0), 64));
  for (int i = 0; i < 14; ++i) REQUIRE(h.extend(1, {50 + i}));  // 19 tokens, 2 full blocks
  const auto seq = h.free(1);
  uint32_t cached = 0;
  REQUIRE(h.reserve(1, seq.tokens, 64, &cached));
  CHECK(cached == 16);
  h.check();
}

TEST_CASE("cached blocks are evicted least recently freed first, and only when blocks run out", "[kv][paged]") {
  Paged alloc(paged_desc(4));
  Harness h(alloc, kvtest::traits_of<llmk::kv::PagedAllocator>(), 32, true);
  const auto x = iota_tokens(9, 0), y = iota_tokens(9, 100), z = iota_tokens(17, 200);
  REQUIRE(h.reserve(1, x, 9));
  REQUIRE(h.reserve(2, y, 9));
  h.free(1);  // x's first block: cached, least recently freed
  h.free(2);
  CHECK(alloc.usage().cached_free_slots == 16);
  CHECK(alloc.usage().reserved_slots == 16);
  REQUIRE(h.reserve(3, z, 17));  // needs 3 blocks: 2 free + x's cached block
  h.free(3);
  uint32_t cached = 0;
  REQUIRE(h.reserve(4, y, 9, &cached));
  CHECK(cached == 8);  // y survived
  h.free(4);
  REQUIRE(h.reserve(5, x, 9, &cached));
  CHECK(cached == 0);  // x was evicted
  h.check();
}

TEST_CASE("reserve counts evictable cached blocks as space and refuses only beyond them", "[kv][paged]") {
  Paged alloc(paged_desc(4));
  Harness h(alloc, kvtest::traits_of<llmk::kv::PagedAllocator>(), 32, true);
  REQUIRE(h.reserve(1, iota_tokens(32, 0), 32));
  h.free(1);
  CHECK(alloc.usage().cached_free_slots == 32);
  CHECK(alloc.usage().reserved_slots == 32);
  REQUIRE(h.reserve(2, iota_tokens(32, 500), 32));  // evicts all four
  CHECK_FALSE(h.reserve(3, iota_tokens(1, 9), 8));
  h.check();
}

TEST_CASE("fork shares blocks and copy-on-write keeps the parent's tokens intact", "[kv][paged]") {
  Paged alloc(paged_desc(8));
  Harness h(alloc, kvtest::traits_of<llmk::kv::PagedAllocator>(), 64, true);
  REQUIRE(h.reserve(1, iota_tokens(12, 0), 64));
  REQUIRE(h.fork(1, 2));
  const auto parent_table = h.table(1);
  CHECK(h.table(2) == parent_table);
  CHECK(alloc.impl.ref_count(parent_table[0] / 8) == 2);
  CHECK(alloc.impl.ref_count(parent_table[1] / 8) == 2);
  CHECK(alloc.usage().used_slots == 12);  // shared slots count once

  REQUIRE(h.extend(2, {77}));  // the child writes into the shared partial block: it gets a copy
  const auto child_table = h.table(2);
  CHECK(child_table[0] == parent_table[0]);
  CHECK(child_table[1] != parent_table[1]);
  CHECK(alloc.usage().num_cow_copies == 1);
  REQUIRE(h.extend(1, {88}));  // the parent is now alone in its block: no copy
  CHECK(alloc.usage().num_cow_copies == 1);
  CHECK(h.table(1) == parent_table);
  h.check();  // both read exactly their own histories
  CHECK(alloc.impl.ref_count(parent_table[0] / 8) == 2);
  CHECK(alloc.impl.ref_count(parent_table[1] / 8) == 1);
}

TEST_CASE("a hash collision costs a miss, never another prefix's K/V", "[kv][paged]") {
  // One hash bit: every block lands in one of two buckets.
  Paged alloc(paged_desc(16, R"({"hash_bits":1})"));
  Harness h(alloc, kvtest::traits_of<llmk::kv::PagedAllocator>(), 128, true);
  const auto a = iota_tokens(8, 0), b = iota_tokens(8, 100), c = iota_tokens(8, 200), d = iota_tokens(8, 300);
  REQUIRE(h.reserve(1, concat(concat(a, b), {1}), 32));
  h.free(1);
  uint32_t cached = 0;
  REQUIRE(h.reserve(2, concat(concat(c, b), {1}), 32, &cached));  // same second block, other prefix
  CHECK(cached == 0);
  h.free(2);
  // Whatever survives the collisions, every hit is verified by the harness.
  for (uint64_t id = 3; id < 40; ++id) {
    const auto& first = (id % 3 == 0) ? a : c;
    const auto& second = (id % 2 == 0) ? b : d;
    REQUIRE(h.reserve(id, concat(concat(first, second), {static_cast<int32_t>(id % 2)}), 32));
    h.check();
    h.free(id);
  }
  // A block nothing collided with since it was registered is still found.
  REQUIRE(h.reserve(50, concat(d, {1}), 32));
  h.free(50);
  REQUIRE(h.reserve(51, concat(d, {1}), 32, &cached));
  CHECK(cached == 8);
  h.check();
}

TEST_CASE("a gap in committed tokens stops indexing that sequence", "[kv][paged]") {
  Paged alloc(paged_desc(8));
  const auto t = iota_tokens(17, 0);
  REQUIRE(alloc.reserve(llmk_kv_reserve_args{1, t.data(), 17, 32}, nullptr));
  alloc.commit_tokens(1, 0, t.data(), 4);
  alloc.commit_tokens(1, 8, t.data() + 8, 9);  // positions 4..7 never committed
  alloc.free_seq(1);
  CHECK(alloc.usage().cached_free_slots == 0);
  uint32_t cached = 1;
  REQUIRE(alloc.reserve(llmk_kv_reserve_args{2, t.data(), 17, 32}, &cached));
  CHECK(cached == 0);
}

TEST_CASE("with prefix caching off nothing is indexed and freed blocks are free", "[kv][paged]") {
  Paged alloc(paged_desc(8, "{}", false));
  Harness h(alloc, kvtest::traits_of<llmk::kv::PagedAllocator>(), 64, false);
  REQUIRE(h.reserve(1, iota_tokens(20, 0), 32));
  h.free(1);
  CHECK(alloc.usage().reserved_slots == 0);
  uint32_t cached = 1;
  REQUIRE(h.reserve(2, iota_tokens(20, 0), 32, &cached));
  CHECK(cached == 0);
  CHECK(alloc.usage().prefix_query_tokens == 0);
}

TEST_CASE("paged waste stays under one block per sequence", "[kv][paged]") {
  Paged alloc(paged_desc(128, "{}", false));
  Harness h(alloc, kvtest::traits_of<llmk::kv::PagedAllocator>(), 1024, false);
  uint64_t total = 0, blocks = 0;
  for (uint32_t id = 1; id <= 12; ++id) {
    const uint32_t n = 3 + 7 * id;  // 10..87 tokens
    total += n;
    blocks += (n + 7) / 8;
    REQUIRE(h.reserve(id, iota_tokens(n, 0), n));
  }
  const auto u = alloc.usage();
  CHECK(u.used_slots == total);
  CHECK(u.reserved_slots == blocks * 8);
  CHECK(u.reserved_slots - u.used_slots < 12 * 8);
}

TEST_CASE("paged supports() explains what it refuses", "[kv][paged]") {
  std::string why;
  auto d = paged_desc(8);
  d.block_size = 512;
  CHECK_FALSE(llmk::kv::PagedAllocator::supports(d, why));
  CHECK(why == "block_size 512 is outside 8..256");
  d = paged_desc(8, R"({"hash_bits":0})");
  CHECK_FALSE(llmk::kv::PagedAllocator::supports(d, why));
  CHECK(why == "kv.paged: option 'hash_bits' must be an integer in 1..64");
  d = paged_desc(8, "not json");
  CHECK_FALSE(llmk::kv::PagedAllocator::supports(d, why));
}
