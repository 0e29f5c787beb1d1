// attention.cuda's token trees (attention API 3.3) on the simulated device,
// through the conformance check every attention plugin meets
// (conformance/attention_check.hpp): a speculating decode's newest token and
// its draft tree beside a prefill chunk, a decode and a causal chunk, each
// row held to the float64 reference that sees the cached context, the row's
// ancestors and itself. F32 and I8 caches go to the paged kernel, F16 and
// BF16 caches to the flash kernel (the plugin's "auto" choice), so both
// multi-row kernels mask by the tree.
#include "test_support.hpp"

#if !defined(LLMK_CUDASIM_PLUGIN_DIR)
#include "support/skip.hpp"
TEST_CASE("attention.cuda's token trees need the simulated plugins", "[attention_cuda][tree]") {
  LLMK_SKIP("this build has no simulated CUDA plugins (tests/cudasim_plugins)");
}
#else

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "conformance/device.hpp"
#include "core/plugin_loader.hpp"
#include "support/attention_check.hpp"
#include "support/skip.hpp"

using namespace llmk;

namespace {

// The conformance suite's tolerances for attention.cuda: F32 accumulation,
// and for the 16-bit caches 8 units of their roundoff (its kv_rounding_ulp).
double tolerance(uint32_t kv_dtype) {
  if (kv_dtype == LLMK_DTYPE_F16) return 8 * std::ldexp(1.0, -11);
  if (kv_dtype == LLMK_DTYPE_BF16) return 8 * std::ldexp(1.0, -8);
  return 2e-5;
}

struct TreeRun {
  PluginRegistry plugins{{LLMK_CUDASIM_PLUGIN_DIR}};
  Plugin plugin = plugins.load("attention.cuda", LLMK_PLUGIN_ATTENTION, "baseline");
  std::unique_ptr<conformance::Device> device = conformance::make_cuda_device("simulated device");

  double max_err(const test::AttentionProblem& p, uint32_t kv_dtype, uint64_t seed) {
    const test::AttentionOutcome r = test::check_attention_step(plugin.attention(), p, kv_dtype, 1, seed, 8, device.get());
    INFO(r.why);
    CHECK(r.supported);
    CHECK(r.cache_ok);
    return r.max_err;
  }
};

// A branching tree, a chain sent as a tree, and a tree deeper than a window of 5.
const std::vector<int32_t> kBranching{-1, 0, 0, 1, 1, 2, 3, 5, 5};
const std::vector<int32_t> kDeep{-1, 0, 1, 2, 3, 4, 5, 6, 2, 8, 0};

}  // namespace

TEST_CASE("attention.cuda declares API 3.3 and refuses tree parents that do not point to an earlier new token",
          "[attention_cuda][tree]") {
  cudasim_test::reset_simulator(1);
  TreeRun run;
  CHECK(LLMK_API_VERSION_MINOR(run.plugin.info().api_version) >= 3);
  test::AttentionProblem p{4, 2, 16, 16, {3, 4}, {10, 4}};
  p.tree_parents = {{-1, 0, 0}, {-1, 0, 2, 1}};  // the second sequence's token 2 names itself
  const auto r = test::check_attention_step(run.plugin.attention(), p, LLMK_DTYPE_F32, 1, 5, 8, run.device.get());
  CHECK(r.max_err == std::numeric_limits<double>::infinity());
  CHECK_THAT(r.why, Catch::Contains("tree_parents[5] = 2 of sequence 1"));
}

TEST_CASE("attention.cuda masks a small token tree on the paged and flash kernels", "[attention_cuda][tree]") {
  // Kept small: the sanitized build runs it too (the launch path).
  cudasim_test::reset_simulator(2);
  TreeRun run;
  test::AttentionProblem p{4, 2, 16, 8, {9, 1, 4}, {20, 7, 4}};
  p.tree_parents = {kBranching, {}, {-1, 0, 0, 1}};
  for (uint32_t kv : {LLMK_DTYPE_F32, LLMK_DTYPE_F16}) {
    INFO("kv dtype " << kv);
    CHECK(run.max_err(p, kv, 7) < tolerance(kv));
  }
  REQUIRE_NO_SIMULATED_RACES();
}

TEST_CASE("attention.cuda masks token trees on every cache type, with windows and sinks",
          "[attention_cuda][tree]") {
  LLMK_SKIP_WHEN_SANITIZED("a grid through simulated kernels the sanitizers do not instrument");
  // A wide tree of 40 nodes spans two flash tiles (32 tokens each at group 2).
  const auto [head_dim, block_size] = GENERATE(table<uint32_t, uint32_t>({{32, 16}, {40, 7}}));
  const uint32_t window = GENERATE(0u, 5u);
  const uint32_t sinks = GENERATE(0u, 4u);
  cudasim_test::reset_simulator(3);
  TreeRun run;
  std::vector<int32_t> wide{-1};
  for (int32_t t = 1; t < 40; ++t) wide.push_back(t < 6 ? 0 : t % 3 == 0 ? (t - 1) / 3 : t / 2);
  test::AttentionProblem p{4, 2, head_dim, block_size, {9, 13, 1, 40, 11, 3}, {30, 13, 25, 52, 11, 3}, window};
  p.sink_tokens = sinks;
  p.tree_parents = {kBranching, {}, {}, wide, kDeep, {-1, 0, 0}};
  for (uint32_t kv : {LLMK_DTYPE_F32, LLMK_DTYPE_F16, LLMK_DTYPE_BF16, LLMK_DTYPE_I8}) {
    INFO("head_dim " << head_dim << ", block " << block_size << ", window " << window << ", sinks " << sinks
                     << ", kv dtype " << kv);
    CHECK(run.max_err(p, kv, 90 + head_dim + kv) < tolerance(kv));
  }
  REQUIRE_NO_SIMULATED_RACES();
}

#endif  // LLMK_CUDASIM_PLUGIN_DIR
