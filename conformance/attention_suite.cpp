// The attention grid: GQA ratios 1, 4 and 8 with odd and common head sizes,
// block sizes 1, 16 and one block holding the whole context, every KV dtype
// the plugin declares (F32, F16, BF16, I8), and mixed steps (a fresh prefill,
// a chunk on a cached prefix, decodes at contexts 1 to 2047) in one call. The
// reduced grid (a simulated device) keeps every shape, block size, window
// and dtype, at contexts up to 300.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "conformance/attention_check.hpp"
#include "conformance/suite.hpp"

namespace llmk::conformance {
namespace {

// The reference reads back what the plugin stored (widened F16 and BF16,
// dequantized I8) and check_attention_step bounds the storing itself, so an
// F32 or I8 cache is held to the F32 accumulation tolerance: scores of
// head_dim products and a softmax-weighted sum over up to 2047 keys, with
// sharp (2x) queries.
constexpr double kF32Tolerance = 2e-5;
// Over a 16-bit cache a plugin may compute on the cache's own type (tensor
// cores: attention.cuda's flash prefill), rounding q and the softmax weights
// to it as well, unit roundoff u = 2^-11 (F16) or 2^-8 (BF16). On this grid
// that costs up to 3.4 u (attention.cuda on the simulated device); 8 u
// leaves twice that, while a masking or indexing error (errors of 0.1 and
// more) still fails.
constexpr double kF16Tolerance = 8.0 / 2048;
constexpr double kBF16Tolerance = 8.0 / 256;

double output_tolerance(uint32_t kv_dtype) {
  return kv_dtype == LLMK_DTYPE_F16 ? kF16Tolerance : kv_dtype == LLMK_DTYPE_BF16 ? kBF16Tolerance : kF32Tolerance;
}

struct KvType {
  const char* name;
  uint32_t dtype;
};
constexpr KvType kKvTypes[] = {
    {"f32", LLMK_DTYPE_F32}, {"f16", LLMK_DTYPE_F16}, {"bf16", LLMK_DTYPE_BF16}, {"i8", LLMK_DTYPE_I8}};

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

SuiteResult run_attention_suite(const Plugin& plugin, const SuiteOptions& options) {
  SuiteResult result;
  result.plugin = plugin.info().name;
  std::unique_ptr<Device> host;
  Device* device = options.device;
  if (device == nullptr) {
    host = make_cpu_device();
    device = host.get();
  }
  result.device = device->description();
  const auto dtypes = declared_kv_dtypes(plugin.info());
  auto run_case = [&](const std::string& name, const AttentionProblem& p, const KvType& kv, uint64_t seed) {
    // I8 groups: 8 values per scale where head_dim allows, else the whole head.
    const uint32_t group = p.head_dim % 8 == 0 ? 8 : p.head_dim;
    const AttentionOutcome r = check_attention_step(plugin.attention(), p, kv.dtype, 2, seed, group, device);
    const double tolerance = output_tolerance(kv.dtype);
    CaseResult c{name, CaseStatus::passed, "max |error|", r.max_err, tolerance, r.why};
    if (!r.supported) {
      c = CaseResult{name, CaseStatus::unsupported, "", 0, 0, r.why};
    } else if (!r.cache_ok) {
      c = CaseResult{name, CaseStatus::failed, "", 0, 0, r.why};
    } else if (!(r.max_err <= tolerance)) {
      c.status = CaseStatus::failed;
    }
    result.cases.push_back(std::move(c));
  };
  // Contexts after the step per sequence: a fresh prefill, a chunk on a
  // cached prefix, decodes.
  const std::vector<int32_t> new_tokens{13, 5, 1, 1, 20, 1};
  const std::vector<int32_t> context = options.reduced ? std::vector<int32_t>{13, 29, 1, 150, 47, 300}
                                                       : std::vector<int32_t>{13, 29, 1, 150, 47, 2047};
  struct Heads {
    uint32_t num_heads, num_kv_heads, head_dim;
  };
  // GQA ratio 1 (odd head size), 4 and 8.
  const Heads heads[] = {{5, 5, 17}, {8, 2, 40}, {8, 1, 64}};
  for (const Heads& h : heads) {
    const std::string shape = "heads " + std::to_string(h.num_heads) + "/" + std::to_string(h.num_kv_heads) +
                              " head_dim " + std::to_string(h.head_dim);
    for (const uint32_t block_size : {1u, 16u, 4096u}) {
      for (const KvType& kv : kKvTypes) {
        if (std::find(dtypes.begin(), dtypes.end(), kv.name) == dtypes.end()) continue;
        const AttentionProblem p{h.num_heads, h.num_kv_heads, h.head_dim, block_size, new_tokens, context};
        run_case(shape + " block " + std::to_string(block_size) + " kv " + kv.name, p, kv,
                 h.head_dim * 131 + block_size + kv.dtype);
      }
    }
    for (const uint32_t window : {1u, 7u, 100u}) {
      for (const KvType& kv : kKvTypes) {
        if (std::find(dtypes.begin(), dtypes.end(), kv.name) == dtypes.end()) continue;
        const AttentionProblem p{h.num_heads, h.num_kv_heads, h.head_dim, 16, new_tokens, context, window};
        run_case(shape + " sliding window " + std::to_string(window) + " kv " + kv.name, p, kv,
                 h.head_dim * 977 + window + kv.dtype);
      }
    }
  }
  return result;
}

}  // namespace llmk::conformance
