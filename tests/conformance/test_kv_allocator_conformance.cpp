// Every KV allocator plugin on the search path, loaded as the engine loads
// it, through long random scheduler-like workloads against the shadow model
// of tests/support/kv_harness.hpp. What is checked beyond the common
// guarantees (every sequence reads its own history, usage() agrees with the
// model's counts) follows from the plugin's capabilities JSON, so a new
// allocator dropped on the search path is covered with no test code.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>

#include "conformance.hpp"
#include "support/kv_harness.hpp"

using namespace llmk;
using namespace llmk::conformance;

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

TEST_CASE("every discovered KV allocator keeps the invariants its capabilities declare over random workloads",
          "[conformance][kv]") {
  PluginRegistry registry(conformance_dirs());
  const auto names = discover_plugins(registry, LLMK_PLUGIN_KV_ALLOCATOR);
  REQUIRE(names.size() >= 3);  // kv.paged, kv.contiguous and kv.vm are always built
  for (const auto& name : names) {
    CAPTURE(name);
    const Plugin plugin = registry.load(name, LLMK_PLUGIN_KV_ALLOCATOR);
    const kvtest::KvTraits traits = kvtest::KvTraits::from_capabilities(plugin.info().capabilities);
    for (bool prefix : {true, false}) {
      for (uint64_t seed : {7u, 8u}) {
        CAPTURE(prefix, seed);
        const uint32_t num_slots = 900, max_seq_len = 128;
        const uint32_t block_size = pick_block_size(plugin.info().capabilities);
        const llmk_kv_allocator_desc desc{sizeof(llmk_kv_allocator_desc), num_slots, block_size, max_seq_len,
                                          prefix ? 1 : 0, "{}"};
        KvAllocatorImpl alloc(plugin, desc);
        kvtest::Harness h(alloc, traits, num_slots, prefix);
        kvtest::run_workload(h, seed, kvtest::Workload{2000, max_seq_len, 3, 16, true});
        const llmk_kv_usage u = alloc.usage();
        // The workload exercised what the plugin declares.
        if (traits.prefix_caching && prefix) CHECK(u.prefix_hit_tokens > 0);
        if (traits.copy_on_write) CHECK(u.num_cow_copies > 0);
      }
    }
  }
}

TEST_CASE("capabilities that do not say how an allocator lays out its slots are refused by name", "[conformance][kv]") {
  CHECK_THROWS_WITH(kvtest::KvTraits::from_capabilities(R"({"prefix_caching":true})"),
                    Catch::Contains("'block_size'"));
  CHECK_THROWS_WITH(kvtest::KvTraits::from_capabilities(R"({"block_size":"max_seq_len","relocation":"yes"})"),
                    Catch::Contains("'relocation'"));
  const auto paged = kvtest::KvTraits::from_capabilities(R"({"block_size":{"min":8,"max":64},"copy_on_write":true})");
  CHECK(paged.paged);
  CHECK(paged.copy_on_write);
  CHECK_FALSE(paged.prefix_caching);
}
