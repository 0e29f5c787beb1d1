// attention.cuda's workspace_bound (attention API 3.1), on host metadata
// only (plan() reads no device memory): no step within the desc's limits
// plans more, and the steps that split the longest decodes most reach it,
// so the host can size one workspace at creation and it is no larger than
// some step needs.
#include "test_support.hpp"

#if !defined(LLMK_CUDASIM_PLUGIN_DIR)
#include "support/skip.hpp"
TEST_CASE("attention.cuda's workspace bound needs the simulated plugins", "[attention_cuda]") {
  LLMK_SKIP("this build has no simulated CUDA plugins (tests/cudasim_plugins)");
}
#else

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "core/plugin_loader.hpp"

using namespace llmk;

namespace {

constexpr uint32_t kBlockSize = 16;

// Plans one step of sequences with `new_tokens` and `context` each (the
// cache holds max_context slots; every table maps the same blocks) and
// returns the workspace plan() asks for.
size_t plan_bytes(const llmk_attention_api& api, void* self, const llmk_attention_desc& desc,
                  const std::vector<int32_t>& new_tokens, const std::vector<int32_t>& context) {
  const uint32_t num_seqs = static_cast<uint32_t>(new_tokens.size());
  const uint32_t max_blocks = (desc.max_context + kBlockSize - 1) / kBlockSize;
  std::vector<int32_t> query_start{0}, tables;
  for (uint32_t s = 0; s < num_seqs; ++s) {
    query_start.push_back(query_start.back() + new_tokens[s]);
    for (uint32_t b = 0; b < max_blocks; ++b) tables.push_back(static_cast<int32_t>(b * kBlockSize));
  }
  const std::vector<int32_t> slots(static_cast<size_t>(query_start.back()), 0);
  const llmk_attention_step step{sizeof(llmk_attention_step), static_cast<uint32_t>(query_start.back()), num_seqs,
                                 max_blocks, kBlockSize, desc.max_context, query_start.data(), context.data(),
                                 slots.data(), tables.data(), query_start.data(), context.data(), slots.data(),
                                 tables.data(), nullptr, nullptr};
  size_t bytes = 0;
  llmk_error err{};
  REQUIRE(api.plan(self, &step, &bytes, &err) == LLMK_OK);
  return bytes;
}

}  // namespace

TEST_CASE("attention.cuda's workspace_bound covers every step within its desc, and the most split steps reach it",
          "[attention_cuda]") {
  cudasim_test::reset_simulator(1);
  PluginRegistry plugins{{LLMK_CUDASIM_PLUGIN_DIR}};
  const Plugin plugin = plugins.load("attention.cuda", LLMK_PLUGIN_ATTENTION, "baseline");
  const llmk_attention_api& api = plugin.attention();
  REQUIRE(api.workspace_bound != nullptr);

  // With sinks the visible keys are the sinks plus the window: 224 + 300
  // keys split where 300 alone do not.
  for (const auto& [window, sinks] :
       {std::pair{0u, 0u}, std::pair{1000u, 0u}, std::pair{300u, 0u}, std::pair{300u, 224u}}) {
    CAPTURE(window, sinks);
    const uint32_t max_context = 4096, max_tokens = 48, max_seqs = 32;
    const llmk_attention_desc desc{sizeof(llmk_attention_desc), 8, 2, 64, 0.125f, LLMK_DTYPE_BF16, 0, max_context,
                                   max_tokens, 1, "{}", window, LLMK_DEVICE_CUDA, LLMK_DTYPE_BF16, max_seqs,
                                   kBlockSize, sinks};
    llmk_error err{};
    void* self = api.create(&desc, &err);
    REQUIRE(self != nullptr);
    size_t bound = 0;
    REQUIRE(api.workspace_bound(self, &bound, &err) == LLMK_OK);

    // d decodes at the longest context, with as many two-token prefills as
    // the step's tokens and sequences allow: the most sequences for d's split.
    size_t most = 0;
    for (uint32_t d = 1; d <= max_seqs; ++d) {
      const uint32_t num_prefills = std::min(max_seqs - d, (max_tokens - d) / 2);
      std::vector<int32_t> new_tokens(d, 1), context(d, static_cast<int32_t>(max_context));
      new_tokens.resize(d + num_prefills, 2);
      context.resize(d + num_prefills, 2);
      const size_t bytes = plan_bytes(api, self, desc, new_tokens, context);
      CHECK(bytes <= bound);
      most = std::max(most, bytes);
    }
    CHECK(most == bound);
    // A long window splits decodes (a workspace); one of 300 keys never does.
    CHECK((bound > 0) == (window != 300 || sinks > 0));

    // Random steps within the limits.
    std::mt19937 rng(window + sinks + 7);
    for (int i = 0; i < 300; ++i) {
      const uint32_t num_seqs = std::uniform_int_distribution<uint32_t>(1, max_seqs)(rng);
      std::vector<int32_t> new_tokens(num_seqs, 1), context(num_seqs);
      for (uint32_t extra = std::uniform_int_distribution<uint32_t>(0, max_tokens - num_seqs)(rng); extra > 0; --extra)
        ++new_tokens[std::uniform_int_distribution<uint32_t>(0, num_seqs - 1)(rng)];
      for (uint32_t s = 0; s < num_seqs; ++s)
        context[s] = std::uniform_int_distribution<int32_t>(new_tokens[s], static_cast<int32_t>(max_context))(rng);
      CHECK(plan_bytes(api, self, desc, new_tokens, context) <= bound);
    }
    api.destroy(self);
  }
}

#endif  // LLMK_CUDASIM_PLUGIN_DIR
