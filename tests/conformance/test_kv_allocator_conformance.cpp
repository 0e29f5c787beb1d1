// Every KV allocator plugin on the search path, loaded as the engine loads
// it, through long random scheduler-like workloads against the shadow model
// of conformance/kv_harness.hpp (conformance/kv_suite.cpp). What is checked beyond the common
// guarantees (every sequence reads its own history, usage() agrees with the
// model's counts) follows from the plugin's capabilities JSON, so a new
// allocator dropped on the search path is covered with no test code.
#include <catch2/catch.hpp>

#include "conformance.hpp"
#include "support/kv_harness.hpp"

using namespace llmk;
using namespace llmk::conformance;

TEST_CASE("every discovered KV allocator keeps the invariants its capabilities declare over random workloads",
          "[conformance][kv]") {
  PluginRegistry registry(conformance_dirs());
  const auto names = discover_plugins(registry, LLMK_PLUGIN_KV_ALLOCATOR);
  REQUIRE(names.size() >= 3);  // kv.paged, kv.contiguous and kv.vm are always built
  for (const auto& name : names) {
    CAPTURE(name);
    const Plugin plugin = registry.load(name, LLMK_PLUGIN_KV_ALLOCATOR);
    const SuiteResult r = run_kv_allocator_suite(plugin);
    for (const auto& f : r.failures()) FAIL_CHECK(f);
    // Prefix caching on and off, two seeds each; with truncate_seq (API 2.3)
    // a speculative workload for each as well, and with evict_tokens (2.4)
    // a streaming one.
    CHECK(r.num_passed() == 4 + (plugin.kv_allocator().truncate_seq != nullptr ? 2 : 0) +
                                (plugin.kv_allocator().evict_tokens != nullptr ? 2 : 0));
  }
}

TEST_CASE("kv.paged, kv.contiguous and kv.vm evict rows after the sinks (API 2.4 evict_tokens)", "[conformance][kv]") {
  PluginRegistry registry(conformance_dirs());
  for (const char* name : {"kv.paged", "kv.contiguous", "kv.vm"}) {
    CAPTURE(name);
    const Plugin plugin = registry.load(name, LLMK_PLUGIN_KV_ALLOCATOR);
    REQUIRE(plugin.kv_allocator().evict_tokens != nullptr);
    const SuiteResult r = run_kv_allocator_suite(plugin);
    size_t num_streaming = 0;
    for (const auto& c : r.cases) {
      if (c.name.rfind("streaming eviction", 0) != 0) continue;
      ++num_streaming;
      INFO(c.name << ": " << c.detail);
      CHECK(c.status == CaseStatus::passed);
    }
    CHECK(num_streaming == 2);
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

TEST_CASE("kv.paged, kv.contiguous and kv.vm roll speculated tokens back (API 2.3 truncate_seq)", "[conformance][kv]") {
  PluginRegistry registry(conformance_dirs());
  for (const char* name : {"kv.paged", "kv.contiguous", "kv.vm"}) {
    CAPTURE(name);
    const Plugin plugin = registry.load(name, LLMK_PLUGIN_KV_ALLOCATOR);
    REQUIRE(plugin.kv_allocator().truncate_seq != nullptr);
    const SuiteResult r = run_kv_allocator_suite(plugin);
    size_t num_speculative = 0;
    for (const auto& c : r.cases) {
      if (c.name.rfind("speculative rollback", 0) != 0) continue;
      ++num_speculative;
      CHECK(c.status == CaseStatus::passed);
    }
    CHECK(num_speculative == 2);
  }
}
