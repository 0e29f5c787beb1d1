// The KV allocator suite: the allocator, loaded as the engine loads it,
// through long random scheduler-like workloads against the shadow model of
// kv_harness.hpp. What is checked beyond the common guarantees (every
// sequence reads its own history, usage() agrees with the model's counts)
// follows from the plugin's capabilities JSON.
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
  for (const bool prefix : {true, false}) {
    for (const uint64_t seed : {7u, 8u}) {
      const std::string name = std::string("prefix caching ") + (prefix ? "on" : "off") + ", seed " +
                               std::to_string(seed) + ": " + std::to_string(num_ops) + " random operations";
      try {
        const llmk_kv_allocator_desc desc{sizeof(llmk_kv_allocator_desc), num_slots, block_size, max_seq_len,
                                          prefix ? 1 : 0, "{}", nullptr, nullptr};
        KvAllocatorImpl alloc(plugin, desc);
        kvtest::Harness h(alloc, traits, num_slots, prefix);
        kvtest::run_workload(h, seed, kvtest::Workload{num_ops, max_seq_len, 3, 16, true});
        const llmk_kv_usage u = alloc.usage();
        // The workload exercised what the plugin declares.
        if (traits.prefix_caching && prefix && u.prefix_hit_tokens == 0)
          throw kvtest::Violation("it declares prefix_caching, but no prefix token was found in the cache");
        if (traits.copy_on_write && u.num_cow_copies == 0)
          throw kvtest::Violation("it declares copy_on_write, but no block was copied on write");
        result.cases.push_back(CaseResult{name, CaseStatus::passed, "", 0, 0, ""});
      } catch (const std::exception& e) {
        result.cases.push_back(CaseResult{name, CaseStatus::failed, "", 0, 0, e.what()});
      }
    }
  }
  return result;
}

}  // namespace llmk::conformance
