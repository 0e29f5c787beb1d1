// Plugin API versions are major.minor: a plugin built against an older minor
// of the engine's major loads, its smaller table read up to its size and the
// fields it lacks at their defaults; another major, or a newer minor, is
// refused with both versions named. The fixtures are attention.cpu behind
// tables of other versions (fixtures/attention_versioned.cpp).
#include <catch2/catch.hpp>

#include <cstddef>
#include <string>

#include "conformance.hpp"
#include "core/error.hpp"
#include "core/plugin_api_version.hpp"
#include "support/skip.hpp"

using namespace llmk;
using namespace llmk::conformance;

namespace {

std::string load_error(const std::string& name) {
  PluginRegistry registry({LLMK_CONFORMANCE_FIXTURE_DIR});
  try {
    registry.load(name, LLMK_PLUGIN_ATTENTION);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const std::string kEngine =
    std::to_string(LLMK_ATTENTION_API_MAJOR) + "." + std::to_string(LLMK_ATTENTION_API_MINOR);

}  // namespace

TEST_CASE("api versions read as major.minor", "[conformance][api_version]") {
  CHECK(api_version_text(LLMK_API_VERSION(3, 1)) == "3.1");
  CHECK(api_version_text(LLMK_API_VERSION(2, 17)) == "2.17");
  CHECK(LLMK_API_VERSION_MAJOR(LLMK_API_VERSION(7, 65535)) == 7);
  CHECK(LLMK_API_VERSION_MINOR(LLMK_API_VERSION(7, 65535)) == 65535);
  // A version from before major.minor (a bare 3) reads as 0.3: another major.
  CHECK(api_version_refusal(LLMK_PLUGIN_ATTENTION, 3).has_value());
}

TEST_CASE("an attention plugin built against API 3.0 loads, lacks 3.1's workspace_bound, and still conforms",
          "[conformance][api_version]") {
  static_assert(LLMK_ATTENTION_API_MAJOR == 3 && LLMK_ATTENTION_API_MINOR >= 1,
                "the fixture pins minor 0 of major 3; move it with the major");
  PluginRegistry registry({LLMK_CONFORMANCE_FIXTURE_DIR});
  const Plugin plugin = registry.load("attention.oldminor", LLMK_PLUGIN_ATTENTION);
  CHECK(plugin.info().api_version == LLMK_API_VERSION(3, 0));
  // The plugin's own table ends where 3.0's did; the host's copy has the
  // engine's layout, with the missing field at its default.
  CHECK(plugin.attention().struct_size == offsetof(llmk_attention_api, workspace_bound));
  CHECK(plugin.attention().workspace_bound == nullptr);
  const llmk_attention_desc desc{sizeof(llmk_attention_desc), 4, 2, 16, 0.25f, LLMK_DTYPE_F32, 0, 64, 64, 1, "{}",
                                 0, LLMK_DEVICE_CPU, LLMK_DTYPE_F32, 4, 16, 0};
  AttentionImpl attention(plugin, desc);
  CHECK_FALSE(attention.workspace_bound().has_value());
  // 3.0 knows nothing of sinks (3.2): the host refuses to hand it any.
  llmk_attention_desc with_sinks = desc;
  with_sinks.sink_tokens = 4;
  CHECK_THROWS_WITH(AttentionImpl(plugin, with_sinks),
                    Catch::Contains("attention.oldminor") && Catch::Contains("implements attention API 3.0") &&
                        Catch::Contains("need 3.2"));

  // The grid runs attention.cpu's own code behind the old table: the
  // sanitized suite sanitizes that code in the baseline grid's case (and
  // this run took 58 s of it on two cores), so only the release build runs it.
  if (llmk::test::in_sanitized_suite()) return;
  const SuiteResult r = run_attention_suite(plugin);
  for (const auto& f : r.failures()) FAIL_CHECK(f);
  CHECK(r.num_passed() > 0);
}

TEST_CASE("an attention plugin built against another major API version is refused naming both versions",
          "[conformance][api_version]") {
  CHECK_THAT(load_error("attention.newmajor"),
             Catch::Contains("libllmk_attention_newmajor.so (attention API version 4.0, engine has " + kEngine +
                             " (a different major version is not compatible))"));
}

TEST_CASE("an attention plugin built against a newer minor than the engine's is refused naming both versions",
          "[conformance][api_version]") {
  CHECK_THAT(load_error("attention.newminor"),
             Catch::Contains("libllmk_attention_newminor.so (attention API version 3." +
                             std::to_string(LLMK_ATTENTION_API_MINOR + 1) + ", engine has " + kEngine +
                             " (a newer minor version than the engine's))"));
}

TEST_CASE("attention.cpu claims 3.3 (token trees); a plugin built with the header's default claims 3.2",
          "[conformance][api_version][tree]") {
  // The host sends tree_parents only to plugins of 3.3 or later
  // (Model::attends_token_trees); a plugin claims 3.3 only by defining
  // LLMK_ATTENTION_API_BUILD_MINOR, so one that never reads the parents
  // (here attention.nosinks, built against the header as it is) gets chains.
  PluginRegistry registry({LLMK_CONFORMANCE_FIXTURE_DIR});
  CHECK(registry.load("attention.cpu", LLMK_PLUGIN_ATTENTION).info().api_version == LLMK_API_VERSION(3, 3));
  CHECK(registry.load("attention.nosinks", LLMK_PLUGIN_ATTENTION).info().api_version == LLMK_API_VERSION(3, 2));
  CHECK(engine_api_version(LLMK_PLUGIN_ATTENTION) == LLMK_API_VERSION(3, 3));
}
