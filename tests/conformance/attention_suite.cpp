// The attention grid: GQA ratios 1, 4 and 8 with odd and common head sizes,
// block sizes 1, 16 and one block holding the whole context, every KV dtype
// the plugin declares, and mixed steps (a fresh prefill, a chunk on a cached
// prefix, decodes at contexts 1 to 2047) in one call.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "conformance.hpp"
#include "support/attention_check.hpp"

namespace llmk::conformance {
namespace {

// The reference reads back what the plugin stored (widened F16,
// dequantized I8) and check_attention_step bounds the storing itself, so
// each dtype is held to the same F32 accumulation tolerance: scores of
// head_dim products and a softmax-weighted sum over up to 2047 keys, with
// sharp (2x) queries.
constexpr double kOutputTolerance = 2e-5;

struct KvType {
  const char* name;
  uint32_t dtype;
};
constexpr KvType kKvTypes[] = {{"f32", LLMK_DTYPE_F32}, {"f16", LLMK_DTYPE_F16}, {"i8", LLMK_DTYPE_I8}};

std::vector<std::string> declared_kv_dtypes(const PluginInfo& info) {
  const auto caps = nlohmann::json::parse(info.capabilities, nullptr, false);
  std::vector<std::string> out;
  if (caps.is_object() && caps.contains("kv_dtypes") && caps["kv_dtypes"].is_array())
    for (const auto& d : caps["kv_dtypes"])
      if (d.is_string()) out.push_back(d.get<std::string>());
  if (out.empty()) out.push_back("f32");  // every attention plugin serves an F32 cache
  return out;
}

}  // namespace

SuiteResult run_attention_suite(const Plugin& plugin) {
  SuiteResult result;
  result.plugin = plugin.info().name;
  const auto dtypes = declared_kv_dtypes(plugin.info());
  auto record = [&](const test::AttentionOutcome& r, const std::string& name) {
    if (!r.supported) {
      ++result.num_unsupported;
    } else if (!r.cache_ok) {
      result.failures.push_back(name + ": " + r.why);
    } else if (!(r.max_err <= kOutputTolerance)) {
      result.failures.push_back(name + ": max error " + std::to_string(r.max_err) + " > " +
                                std::to_string(kOutputTolerance) + (r.why.empty() ? "" : " (" + r.why + ")"));
    } else {
      ++result.num_passed;
    }
  };
  struct Heads {
    uint32_t num_heads, num_kv_heads, head_dim;
  };
  // GQA ratio 1 (odd head size), 4 and 8.
  const Heads heads[] = {{5, 5, 17}, {8, 2, 40}, {8, 1, 64}};
  for (const Heads& h : heads) {
    for (const uint32_t block_size : {1u, 16u, 4096u}) {
      for (const KvType& kv : kKvTypes) {
        if (std::find(dtypes.begin(), dtypes.end(), kv.name) == dtypes.end()) continue;
        // I8 groups: 8 values per scale where head_dim allows, else the whole head.
        const uint32_t group = h.head_dim % 8 == 0 ? 8 : h.head_dim;
        test::AttentionProblem p{h.num_heads, h.num_kv_heads, h.head_dim, block_size,
                                 {13, 5, 1, 1, 20, 1}, {13, 29, 1, 150, 47, 2047}};
        const std::string name = "heads " + std::to_string(h.num_heads) + "/" + std::to_string(h.num_kv_heads) +
                                 " head_dim " + std::to_string(h.head_dim) + " block " + std::to_string(block_size) +
                                 " kv " + kv.name;
        record(test::check_attention_step(plugin.attention(), p, kv.dtype, 2,
                                          h.head_dim * 131 + block_size + kv.dtype, group),
               name);
      }
    }
    for (const uint32_t window : {1u, 7u, 100u}) {
      for (const KvType& kv : kKvTypes) {
        if (std::find(dtypes.begin(), dtypes.end(), kv.name) == dtypes.end()) continue;
        const uint32_t group = h.head_dim % 8 == 0 ? 8 : h.head_dim;
        test::AttentionProblem p{h.num_heads, h.num_kv_heads, h.head_dim, 16, {13, 5, 1, 1, 20, 1},
                                 {13, 29, 1, 150, 47, 2047}, window};
        const std::string name = "heads " + std::to_string(h.num_heads) + "/" + std::to_string(h.num_kv_heads) +
                                 " head_dim " + std::to_string(h.head_dim) + " sliding window " +
                                 std::to_string(window) + " kv " + kv.name;
        record(test::check_attention_step(plugin.attention(), p, kv.dtype, 2,
                                          h.head_dim * 977 + window + kv.dtype, group),
               name);
      }
    }
  }
  return result;
}

}  // namespace llmk::conformance
