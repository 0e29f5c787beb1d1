#include "conformance.hpp"

#include <catch2/catch.hpp>

#include "support/skip.hpp"

namespace llmk::conformance {

void check_plugins_at(llmk_plugin_kind kind, const std::string& isa,
                      SuiteResult (*suite)(const Plugin&, const SuiteOptions&)) {
  if (const std::string why = cpu_level_unavailable(isa); !why.empty()) LLMK_SKIP(why);
  PluginRegistry registry(conformance_dirs());
  const auto files = discover_plugin_files(registry, kind, isa);
  REQUIRE_FALSE(files.empty());  // attention.cpu and linear.dense are built at every level
  for (const auto& file : files) {
    const SuiteResult r = suite(registry.load(file.name, kind, file.isa), {});
    INFO(file.name << " (" << isa << "): " << r.num_passed() << " passed, " << r.num_unsupported() << " unsupported");
    for (const auto& f : r.failures()) FAIL_CHECK(file.name << " (" << isa << "): " << f);
    CHECK(r.num_passed() > 0);
  }
}

}  // namespace llmk::conformance
