// kv.vm and kv.contiguous scenarios: range sizing, the output predictor,
// growth in place, relocation, merging, deferred fork copies.
#include <catch2/catch.hpp>

#include "support/kv_harness.hpp"
#include "plugins/kv_contiguous/contiguous_allocator.hpp"
#include "plugins/kv_vm/vm_allocator.hpp"

using kvtest::Harness;
using Vm = kvtest::Direct<llmk::kv::VmAllocator>;
using Contiguous = kvtest::Direct<llmk::kv::ContiguousAllocator>;

namespace {

llmk_kv_allocator_desc vm_desc(uint32_t num_slots, const char* options = "{}", uint32_t max_seq_len = 256) {
  return llmk_kv_allocator_desc{sizeof(llmk_kv_allocator_desc), num_slots, 16, max_seq_len, 1, options, nullptr, nullptr};
}

std::vector<int32_t> tokens(uint32_t n) { return std::vector<int32_t>(n, 3); }

}  // namespace

TEST_CASE("a VM range is the prompt plus the predicted share of max_tokens", "[kv][vm]") {
  Vm alloc(vm_desc(1000));
  Harness h(alloc, kvtest::traits_of<llmk::kv::VmAllocator>(), 1000, false);
  REQUIRE(h.reserve(1, tokens(10), 110));
  CHECK(alloc.impl.capacity(1) == 10 + 50);  // default ratio 0.5
  CHECK(alloc.usage().reserved_slots == 60);
  CHECK(alloc.usage().used_slots == 10);
  REQUIRE(h.reserve(2, tokens(10), 1000));  // max_total_tokens is capped by max_seq_len
  CHECK(alloc.impl.capacity(2) == 10 + 123);
  CHECK(alloc.block_size() == 256);
  CHECK(h.table(2) == std::vector<int32_t>{60});
}

TEST_CASE("the VM predictor learns the p90 output share from finished requests", "[kv][vm]") {
  Vm alloc(vm_desc(4000, R"({"min_samples":4,"quantile":0.9,"window":10})"));
  Harness h(alloc, kvtest::traits_of<llmk::kv::VmAllocator>(), 4000, false);
  // Ten requests with max_tokens 100 that stop after 1..10 tokens.
  for (uint32_t i = 1; i <= 10; ++i) {
    REQUIRE(h.reserve(i, tokens(20), 120));
    for (uint32_t k = 0; k < i; ++k) REQUIRE(h.extend(i, {1}));
    h.free(i);
  }
  CHECK(alloc.impl.predicted_ratio() == Approx(0.09));  // p90 of 0.01..0.10
  REQUIRE(h.reserve(100, tokens(20), 220));
  CHECK(alloc.impl.capacity(100) == 20 + 18);  // ceil(0.09 * 200)
}

TEST_CASE("a preempted VM sequence's sample is withdrawn when it resumes", "[kv][vm]") {
  Vm alloc(vm_desc(4000, R"({"min_samples":1,"default_output_ratio":0.5})"));
  Harness h(alloc, kvtest::traits_of<llmk::kv::VmAllocator>(), 4000, false);
  REQUIRE(h.reserve(1, tokens(10), 110));
  REQUIRE(h.extend(1, {1}));
  const auto seq = h.free(1);  // looks like a request that used 1% of its budget
  CHECK(alloc.impl.predicted_ratio() == Approx(0.01));
  REQUIRE(h.reserve(1, seq.tokens, 110));  // it was a preemption after all
  CHECK(alloc.impl.predicted_ratio() == Approx(0.5));
}

TEST_CASE("a VM sequence grows in place when its right neighbour is free", "[kv][vm]") {
  Vm alloc(vm_desc(1000, R"({"default_output_ratio":0})"));
  Harness h(alloc, kvtest::traits_of<llmk::kv::VmAllocator>(), 1000, false);
  REQUIRE(h.reserve(1, tokens(10), 200));
  CHECK(alloc.impl.capacity(1) == 10);
  REQUIRE(h.extend(1, {1}));  // no copy, same start
  CHECK(h.table(1) == std::vector<int32_t>{0});
  CHECK(alloc.impl.capacity(1) == 20);  // at least doubled
  CHECK(alloc.usage().num_extend_in_place == 1);
  CHECK(alloc.usage().num_relocations == 0);
  h.check();
}

TEST_CASE("a VM sequence relocates when its neighbour is taken, and its old range is freed", "[kv][vm]") {
  Vm alloc(vm_desc(1000, R"({"default_output_ratio":0})"));
  Harness h(alloc, kvtest::traits_of<llmk::kv::VmAllocator>(), 1000, false);
  REQUIRE(h.reserve(1, tokens(10), 200));
  REQUIRE(h.reserve(2, tokens(10), 200));  // right after sequence 1
  CHECK(h.table(2) == std::vector<int32_t>{10});
  REQUIRE(h.extend(1, {5}));  // the harness checks the returned copy moves all ten live slots
  CHECK(h.table(1) == std::vector<int32_t>{20});
  CHECK(alloc.usage().num_relocations == 1);
  CHECK(alloc.impl.free_ranges().front() == std::pair<uint32_t, uint32_t>{0, 10});
  h.check();
}

TEST_CASE("VM extend answers NO_SPACE when nothing fits and leaves the sequence as it was", "[kv][vm]") {
  Vm alloc(vm_desc(100, R"({"default_output_ratio":0})", 100));
  Harness h(alloc, kvtest::traits_of<llmk::kv::VmAllocator>(), 100, false);
  REQUIRE(h.reserve(1, tokens(40), 100));
  REQUIRE(h.reserve(2, tokens(40), 100));
  REQUIRE(h.reserve(3, tokens(20), 100));
  CHECK_FALSE(h.extend(1, {1}));  // the harness checks nothing changed
  h.free(3);
  REQUIRE(h.extend(2, {1}));  // now the right neighbour is free
  CHECK(alloc.usage().num_extend_in_place == 1);
  h.check();
}

TEST_CASE("freed VM ranges merge with both neighbours", "[kv][vm]") {
  Vm alloc(vm_desc(300, R"({"default_output_ratio":0})"));
  Harness h(alloc, kvtest::traits_of<llmk::kv::VmAllocator>(), 300, false);
  for (uint64_t id = 1; id <= 3; ++id) REQUIRE(h.reserve(id, tokens(100), 100));
  CHECK(alloc.usage().largest_free_run == 0);
  h.free(1);
  h.free(3);
  CHECK(alloc.impl.free_ranges().size() == 2);
  CHECK(alloc.usage().largest_free_run == 100);
  h.free(2);
  CHECK(alloc.impl.free_ranges() == std::vector<std::pair<uint32_t, uint32_t>>{{0, 300}});
  CHECK(alloc.usage().largest_free_run == 300);
}

TEST_CASE("VM reserve picks the smallest free range that holds the prediction", "[kv][vm]") {
  Vm alloc(vm_desc(400, R"({"default_output_ratio":0})"));
  Harness h(alloc, kvtest::traits_of<llmk::kv::VmAllocator>(), 400, false);
  REQUIRE(h.reserve(1, tokens(50), 50));   // [0, 50)
  REQUIRE(h.reserve(2, tokens(10), 10));   // [50, 60)
  REQUIRE(h.reserve(3, tokens(20), 20));   // [60, 80)
  REQUIRE(h.reserve(4, tokens(10), 10));   // [80, 90); [90, 400) free
  h.free(1);
  h.free(3);
  REQUIRE(h.reserve(5, tokens(15), 15));
  CHECK(h.table(5) == std::vector<int32_t>{60});  // the 20-slot hole, not the 50 or the 310
}

TEST_CASE("a forked VM child gets its parent's K/V through its first extend, even after the parent is freed",
          "[kv][vm]") {
  Vm alloc(vm_desc(1000));
  Harness h(alloc, kvtest::traits_of<llmk::kv::VmAllocator>(), 1000, false);
  REQUIRE(h.reserve(1, tokens(30), 60));
  REQUIRE(h.fork(1, 2));
  const auto reserved = alloc.usage().reserved_slots;
  h.free(1);
  CHECK(alloc.usage().reserved_slots == reserved);  // the parent's slots are pinned for the copy
  CHECK(alloc.impl.pinned_ranges().size() == 1);
  REQUIRE(h.extend(2, {9}));  // returns the copy; the harness then checks the child's 31 tokens
  CHECK(alloc.impl.pinned_ranges().empty());
  CHECK(alloc.usage().reserved_slots == alloc.impl.capacity(2));
  h.check();
}

TEST_CASE("the contiguous allocator gives every sequence a max_seq_len region", "[kv][contiguous]") {
  const auto desc = llmk_kv_allocator_desc{sizeof(llmk_kv_allocator_desc), 350, 16, 100, 1, "{}", nullptr, nullptr};
  Contiguous alloc(desc);
  Harness h(alloc, kvtest::traits_of<llmk::kv::ContiguousAllocator>(), 350, false);
  CHECK(alloc.block_size() == 100);
  REQUIRE(h.reserve(1, tokens(1), 100));
  REQUIRE(h.reserve(2, tokens(7), 100));
  REQUIRE(h.reserve(3, tokens(100), 100));
  CHECK(h.table(2) == std::vector<int32_t>{100});
  const auto u = alloc.usage();
  CHECK(u.total_slots == 300);  // the 50-slot tail holds no region
  CHECK(u.reserved_slots == 300);
  CHECK(u.used_slots == 108);
  CHECK(u.largest_free_run == 0);
  CHECK_FALSE(h.reserve(4, tokens(1), 100));
  h.free(2);
  CHECK(alloc.usage().largest_free_run == 100);
  REQUIRE(h.fork(1, 5));
  h.free(1);
  CHECK(alloc.impl.pinned_free_regions() == std::vector<uint32_t>{0});
  REQUIRE(h.extend(5, {4}));
  CHECK(alloc.impl.pinned_free_regions().empty());
  h.check();
}
