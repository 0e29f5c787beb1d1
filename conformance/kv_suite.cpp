// The KV allocator suite: the allocator, loaded as the engine loads it,
// through long random scheduler-like workloads against the shadow model of
// kv_harness.hpp. What is checked beyond the common guarantees (every
// sequence reads its own history, usage() agrees with the model's counts)
// follows from the plugin's capabilities JSON. After each workload, a
// flush_cache (API 2.2) must drop exactly the cached free blocks. With
// truncate_seq (API 2.3), workloads of speculative steps (drafts written,
// some accepted and committed, the rest rolled back) run as well; with
// evict_tokens (API 2.4), workloads where sequences drop rows after their
// first block, as a StreamingLLM window does.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <exception>
#include <string>

#include "conformance/kv_harness.hpp"
#include "conformance/suite.hpp"

namespace llmk::conformance {
namespace {

// The block size to ask for: 16 where the declared range allows it.
uint32_t pick_block_size(const std::string& capabilities) {
  const auto caps = nlohmann::json::parse(capabilities);
  const auto& block = caps.at("block_size");
  if (!block.is_object()) return 16;
  const uint32_t lo = block.value("min", 1u), hi = block.value("max", 1u << 20);
  return std::clamp<uint32_t>(16, lo, hi);
}

// flush_cache (API 2.2) after a workload: every cached block no live
// sequence holds is dropped, live sequences keep what they read; without
// the entry nothing changes.
void check_flush(const Plugin& plugin, KvAllocator& alloc, const kvtest::Harness& h, const llmk_kv_usage& before) {
  const uint32_t num_dropped = alloc.flush_cache();
  const llmk_kv_usage after = alloc.usage();
  if (plugin.kv_allocator().flush_cache == nullptr) {
    if (num_dropped != 0 || !kvtest::same_usage(before, after))
      throw kvtest::Violation("without flush_cache, a flush changed the allocator");
    return;
  }
  if (after.cached_free_slots != 0)
    throw kvtest::Violation("flush_cache left " + std::to_string(after.cached_free_slots) + " cached free slots");
  if (after.used_slots != before.used_slots || after.num_seqs != before.num_seqs ||
      after.reserved_slots != before.reserved_slots - before.cached_free_slots)
    throw kvtest::Violation("flush_cache changed more than the cached free slots (usage before and after differ)");
  if (static_cast<uint64_t>(num_dropped) * alloc.block_size() != before.cached_free_slots)
    throw kvtest::Violation("flush_cache reported " + std::to_string(num_dropped) + " blocks dropped, " +
                            std::to_string(before.cached_free_slots) + " cached free slots were held");
  h.check();  // every live sequence still reads its own history
}

}  // namespace

SuiteResult run_kv_allocator_suite(const Plugin& plugin, const SuiteOptions& options) {
  SuiteResult result;
  result.plugin = plugin.info().name;
  result.device = "cpu";  // bookkeeping only: no device memory
  kvtest::KvTraits traits;
  uint32_t block_size = 16;
  try {
    traits = kvtest::KvTraits::from_capabilities(plugin.info().capabilities);
    block_size = pick_block_size(plugin.info().capabilities);
  } catch (const std::exception& e) {
    result.errors.push_back(std::string("capabilities: ") + e.what());
    return result;
  }
  const uint32_t num_slots = 900, max_seq_len = 128, num_ops = options.reduced ? 500 : 2000;
  // Plain workloads for seeds 7 and 8; speculative ones and streaming
  // windows (evictions) for one seed each.
  struct Case {
    bool prefix;
    uint64_t seed;
    bool speculate;
    bool evict = false;
  };
  const Case all_cases[] = {{true, 7, false},        {true, 8, false},        {false, 7, false},
                            {false, 8, false},       {true, 9, true},         {false, 9, true},
                            {true, 10, false, true}, {false, 10, false, true}};
  for (const auto& [prefix, seed, speculate, evict] : all_cases) {
    const std::string name = std::string(speculate ? "speculative rollback, " : "") +
                             (evict ? "streaming eviction, " : "") + "prefix caching " + (prefix ? "on" : "off") +
                             ", seed " + std::to_string(seed) + ": " + std::to_string(num_ops) + " random operations";
    if (speculate && plugin.kv_allocator().truncate_seq == nullptr) {
      result.cases.push_back(CaseResult{name, CaseStatus::unsupported, "", 0, 0,
                                        "no truncate_seq (KV allocator API 2.3): it cannot roll back"});
      continue;
    }
    if (evict && plugin.kv_allocator().evict_tokens == nullptr) {
      result.cases.push_back(CaseResult{name, CaseStatus::unsupported, "", 0, 0,
                                        "no evict_tokens (KV allocator API 2.4): no streaming window"});
      continue;
    }
    try {
      const llmk_kv_allocator_desc desc{sizeof(llmk_kv_allocator_desc), num_slots, block_size, max_seq_len,
                                        prefix ? 1 : 0, "{}", nullptr, nullptr};
      KvAllocatorImpl alloc(plugin, desc);
      kvtest::Harness h(alloc, traits, num_slots, prefix);
      kvtest::run_workload(h, seed, kvtest::Workload{num_ops, max_seq_len, 3, 16, true, speculate, evict});
      const llmk_kv_usage u = alloc.usage();
      // The workload exercised what the plugin declares.
      if (traits.prefix_caching && prefix && u.prefix_hit_tokens == 0)
        throw kvtest::Violation("it declares prefix_caching, but no prefix token was found in the cache");
      if (traits.copy_on_write && u.num_cow_copies == 0)
        throw kvtest::Violation("it declares copy_on_write, but no block was copied on write");
      check_flush(plugin, alloc, h, u);
      result.cases.push_back(CaseResult{name, CaseStatus::passed, "", 0, 0, ""});
    } catch (const std::exception& e) {
      result.cases.push_back(CaseResult{name, CaseStatus::failed, "", 0, 0, e.what()});
    }
  }
  return result;
}

}  // namespace llmk::conformance
