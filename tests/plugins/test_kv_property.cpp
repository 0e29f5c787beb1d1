// Long random workloads (fixed seeds) against every allocator, driven
// directly with checks of its internals. Through the loader, every allocator
// plugin discovery finds runs them in tests/conformance.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "support/kv_harness.hpp"
#include "plugins/kv_contiguous/contiguous_allocator.hpp"
#include "plugins/kv_paged/paged_allocator.hpp"
#include "plugins/kv_vm/vm_allocator.hpp"

using kvtest::Direct;
using kvtest::Harness;
using kvtest::Workload;

namespace {

llmk_kv_allocator_desc make_desc(uint32_t num_slots, uint32_t block_size, uint32_t max_seq_len, bool prefix,
                                 const char* options = "{}") {
  return llmk_kv_allocator_desc{sizeof(llmk_kv_allocator_desc), num_slots, block_size, max_seq_len, prefix ? 1 : 0,
                                options, nullptr, nullptr};
}

// Reference counts, the free list, the LRU of cached blocks and the cached
// blocks' tokens, recounted from the block tables and the simulated cache.
void check_paged(const llmk::kv::PagedAllocator& a, const Harness& h) {
  const uint32_t bs = a.block_size();
  std::vector<uint32_t> refs(a.num_blocks(), 0);
  for (const auto& [id, seq] : h.live()) {
    auto t = h.table(id);
    for (int32_t entry : t) {
      REQUIRE(entry % static_cast<int32_t>(bs) == 0);
      ++refs[entry / bs];
    }
    std::sort(t.begin(), t.end());
    REQUIRE(std::adjacent_find(t.begin(), t.end()) == t.end());  // no block twice in one table
  }
  uint32_t num_free = 0, num_cached_free = 0;
  uint64_t run = 0, longest = 0;
  for (uint32_t b = 0; b < a.num_blocks(); ++b) {
    REQUIRE(a.ref_count(b) == refs[b]);
    const bool free = refs[b] == 0 && !a.is_cached(b);
    num_free += free;
    num_cached_free += refs[b] == 0 && a.is_cached(b);
    run = free ? run + 1 : 0;
    longest = std::max(longest, run);
    if (a.is_cached(b)) {
      // A registered block holds exactly the tokens it was registered with.
      const auto& tokens = a.cached_tokens(b);
      REQUIRE(tokens.size() == bs);
      bool match = true;
      for (uint32_t i = 0; i < bs; ++i) match = match && h.kv()[b * bs + i].token == tokens[i];
      INFO("cached block " << b);
      REQUIRE(match);
    }
  }
  llmk_kv_usage u{};
  a.usage(u);
  REQUIRE(a.num_free_blocks() == num_free);
  REQUIRE(u.cached_free_slots == uint64_t{num_cached_free} * bs);
  REQUIRE(u.total_slots - u.reserved_slots == uint64_t{num_free} * bs);
  REQUIRE(u.largest_free_run == longest * bs);
}

// Live ranges, pinned ranges and free ranges tile the cache exactly; free
// ranges are merged; growth is counted as in place or relocation, and a
// relocation happens only when the right neighbour could not hold it.
struct VmChecker {
  struct Seen {
    uint32_t start, capacity, length;
  };
  std::map<uint64_t, Seen> prev;
  std::vector<std::pair<uint32_t, uint32_t>> prev_free;
  uint64_t relocations = 0, in_place = 0;

  void operator()(const llmk::kv::VmAllocator& a, const Harness& h) {
    llmk_kv_usage u{};
    a.usage(u);
    std::vector<std::pair<uint32_t, uint32_t>> all;  // (start, length)
    std::map<uint64_t, Seen> now;
    for (const auto& [id, seq] : h.live()) {
      const uint32_t start = static_cast<uint32_t>(h.table(id)[0]);
      const uint32_t cap = a.capacity(id);
      const uint32_t len = static_cast<uint32_t>(seq.tokens.size());
      REQUIRE(cap >= len);
      all.emplace_back(start, cap);
      now[id] = Seen{start, cap, len};
      auto p = prev.find(id);
      if (p == prev.end()) continue;
      if (p->second.start != start) {
        ++relocations;
        uint32_t right = 0;  // free slots that were just right of the old range
        for (auto [s, l] : prev_free) {
          if (s == p->second.start + p->second.capacity) right = l;
        }
        REQUIRE(p->second.capacity + right < len);
      } else if (cap > p->second.capacity) {
        ++in_place;
        REQUIRE(len > p->second.capacity);  // grows only when it must
      }
    }
    const auto free = a.free_ranges();
    uint64_t free_total = 0, longest = 0;
    for (size_t i = 0; i < free.size(); ++i) {
      REQUIRE(free[i].second > 0);
      if (i > 0) REQUIRE(free[i - 1].first + free[i - 1].second < free[i].first);  // merged
      free_total += free[i].second;
      longest = std::max<uint64_t>(longest, free[i].second);
    }
    for (auto r : a.pinned_ranges()) all.push_back(r);
    all.insert(all.end(), free.begin(), free.end());
    std::sort(all.begin(), all.end());
    uint64_t cursor = 0;
    for (auto [s, l] : all) {
      REQUIRE(s == cursor);  // no gap, no overlap
      cursor += l;
    }
    REQUIRE(cursor == u.total_slots);
    REQUIRE(u.reserved_slots == u.total_slots - free_total);
    REQUIRE(u.largest_free_run == longest);
    REQUIRE(u.num_relocations == relocations);
    REQUIRE(u.num_extend_in_place == in_place);
    prev = std::move(now);
    prev_free = free;
  }
};

void check_contiguous(const llmk::kv::ContiguousAllocator& a, const Harness& h) {
  llmk_kv_usage u{};
  a.usage(u);
  const uint64_t len = a.block_size();
  REQUIRE(u.reserved_slots == (h.live().size() + a.pinned_free_regions().size()) * len);
  for (const auto& [id, seq] : h.live()) REQUIRE(h.table(id)[0] % len == 0);
}

}  // namespace

TEST_CASE("paged allocator keeps every invariant over long random workloads", "[kv][paged][property]") {
  for (uint32_t bs : {8u, 16u}) {
    for (bool prefix : {true, false}) {
      for (uint64_t seed : {1u, 2u, 3u}) {
        CAPTURE(bs, prefix, seed);
        const uint32_t num_slots = 48 * bs + 5;  // a ragged tail the allocator must not use
        Direct<llmk::kv::PagedAllocator> alloc(make_desc(num_slots, bs, 128, prefix));
        Harness h(alloc, kvtest::traits_of<llmk::kv::PagedAllocator>(), num_slots, prefix);
        h.extra_check = [&](const Harness& hh) { check_paged(alloc.impl, hh); };
        kvtest::run_workload(h, seed, Workload{3000, 128, 3, bs, true});
        if (prefix) REQUIRE(alloc.usage().prefix_hit_tokens > 0);
        REQUIRE(alloc.usage().num_cow_copies > 0);
      }
    }
  }
}

TEST_CASE("paged allocator never returns wrong K/V when every hash collides", "[kv][paged][property]") {
  // hash_bits 2: four buckets for every block ever registered.
  for (uint64_t seed : {11u, 12u, 13u, 14u}) {
    CAPTURE(seed);
    const uint32_t num_slots = 64 * 8;
    Direct<llmk::kv::PagedAllocator> alloc(make_desc(num_slots, 8, 96, true, R"({"hash_bits":2})"));
    Harness h(alloc, kvtest::traits_of<llmk::kv::PagedAllocator>(), num_slots, true);
    h.extra_check = [&](const Harness& hh) { check_paged(alloc.impl, hh); };
    kvtest::run_workload(h, seed, Workload{3000, 96, 2, 8, true});
    REQUIRE(alloc.usage().prefix_hit_tokens > 0);
  }
}

TEST_CASE("contiguous allocator keeps every invariant over long random workloads", "[kv][contiguous][property]") {
  for (uint64_t seed : {1u, 2u, 3u}) {
    CAPTURE(seed);
    const uint32_t num_slots = 12 * 96 + 17;
    Direct<llmk::kv::ContiguousAllocator> alloc(make_desc(num_slots, 16, 96, true));
    Harness h(alloc, kvtest::traits_of<llmk::kv::ContiguousAllocator>(), num_slots, true);
    h.extra_check = [&](const Harness& hh) { check_contiguous(alloc.impl, hh); };
    kvtest::run_workload(h, seed, Workload{3000, 96, 3, 16, true});
  }
}

TEST_CASE("VM allocator keeps every invariant over long random workloads", "[kv][vm][property]") {
  for (const char* options : {"{}", R"({"default_output_ratio":0.1,"min_samples":2,"window":32})"}) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      CAPTURE(options, seed);
      const uint32_t num_slots = 1000;
      Direct<llmk::kv::VmAllocator> alloc(make_desc(num_slots, 16, 160, true, options));
      Harness h(alloc, kvtest::traits_of<llmk::kv::VmAllocator>(), num_slots, true);
      VmChecker vm;
      h.extra_check = [&](const Harness& hh) { vm(alloc.impl, hh); };
      kvtest::run_workload(h, seed, Workload{3000, 160, 3, 24, true});
      REQUIRE(vm.relocations > 0);
      REQUIRE(vm.in_place > 0);
    }
  }
}
