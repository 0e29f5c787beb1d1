// The attention grid: GQA ratios 1, 4 and 8 with odd and common head sizes,
// block sizes 1, 16 and one block holding the whole context, every KV dtype
// the plugin declares (F32, F16, BF16, I8), and mixed steps (a fresh prefill,
// a chunk on a cached prefix, decodes at contexts 1 to 2047) in one call. The
// reduced grid (a simulated device) keeps every shape, block size, window
// and dtype, at contexts up to 300.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "conformance/attention_check.hpp"
#include "conformance/suite.hpp"
#include "core/plugin_api_version.hpp"

namespace llmk::conformance {
namespace {

// The reference reads back what the plugin stored (widened F16 and BF16,
// dequantized I8) and check_attention_step bounds the storing itself, so a
// plugin that computes in F32 is held to the F32 accumulation tolerance on
// every cache type: scores of head_dim products and a softmax-weighted sum
// over up to 2047 keys, with sharp (2x) queries.
constexpr double kF32Tolerance = 2e-5;
// Over a 16-bit cache a plugin may compute on the cache's own type (tensor
// cores: attention.cuda's flash prefill), rounding q and the softmax weights
// to it as well. Such a plugin declares, in its capabilities, the error it
// allows itself in units of that type's unit roundoff u = 2^-11 (F16) or
// 2^-8 (BF16): "kv_rounding_ulp": {"f16": 8, "bf16": 8}. The suite holds it
// to that instead of kF32Tolerance, and to no more than kMaxRoundingUlp:
// 16 u of BF16 is 0.0625, below the 0.1 and more that a masking or indexing
// error costs, so a declaration cannot hide one.
constexpr double kMaxRoundingUlp = 16;

double unit_roundoff(uint32_t kv_dtype) {
  return kv_dtype == LLMK_DTYPE_F16 ? 0x1p-11 : kv_dtype == LLMK_DTYPE_BF16 ? 0x1p-8 : 0;
}

struct KvType {
  const char* name;
  uint32_t dtype;
};
constexpr KvType kKvTypes[] = {
    {"f32", LLMK_DTYPE_F32}, {"f16", LLMK_DTYPE_F16}, {"bf16", LLMK_DTYPE_BF16}, {"i8", LLMK_DTYPE_I8}};

// What the plugin's capabilities declare: the KV dtypes it serves and the
// tolerance per dtype. Throws std::runtime_error naming a declaration the
// suite cannot honour.
struct Declared {
  std::vector<std::string> kv_dtypes;
  double tolerance[LLMK_DTYPE_I8 + 1] = {};
};

Declared declared(const PluginInfo& info, std::vector<std::string>& notes) {
  const auto caps = nlohmann::json::parse(info.capabilities, nullptr, false);
  if (!caps.is_object()) throw std::runtime_error("capabilities are not a JSON object");
  Declared d;
  if (caps.contains("kv_dtypes") && caps["kv_dtypes"].is_array())
    for (const auto& t : caps["kv_dtypes"])
      if (t.is_string()) d.kv_dtypes.push_back(t.get<std::string>());
  if (d.kv_dtypes.empty()) d.kv_dtypes.push_back("f32");  // every attention plugin serves an F32 cache
  for (double& t : d.tolerance) t = kF32Tolerance;
  if (!caps.contains("kv_rounding_ulp")) return d;
  const auto& ulps = caps["kv_rounding_ulp"];
  if (!ulps.is_object())
    throw std::runtime_error("capabilities: kv_rounding_ulp must be an object of KV dtype -> ulps");
  for (const auto& [name, value] : ulps.items()) {
    const auto kv =
        std::find_if(std::begin(kKvTypes), std::end(kKvTypes), [&](const KvType& t) { return name == t.name; });
    if (kv == std::end(kKvTypes) || unit_roundoff(kv->dtype) == 0)
      throw std::runtime_error("capabilities: kv_rounding_ulp names '" + name + "', not a 16-bit KV dtype (f16, bf16)");
    if (!value.is_number() || !(value.get<double>() > 0) || value.get<double>() > kMaxRoundingUlp)
      throw std::runtime_error("capabilities: kv_rounding_ulp." + name + " is " + value.dump() +
                               ", the suite allows a number in (0, " + std::to_string(int(kMaxRoundingUlp)) +
                               "] (more would let a masking error pass)");
    const double ulp = value.get<double>();
    d.tolerance[kv->dtype] = std::max(kF32Tolerance, ulp * unit_roundoff(kv->dtype));
    char line[160];
    std::snprintf(line, sizeof(line), "kv %s: %g ulp of %s as declared (kv_rounding_ulp), tolerance %.3g", kv->name,
                  ulp, kv->name, d.tolerance[kv->dtype]);
    notes.push_back(line);
  }
  return d;
}

}  // namespace

SuiteResult run_attention_suite(const Plugin& plugin, const SuiteOptions& options) {
  const SuiteDevice device(options.device);
  SuiteResult result = new_result(plugin, *device);
  Declared decl;
  try {
    decl = declared(plugin.info(), result.notes);
  } catch (const std::exception& e) {
    result.errors.push_back(e.what());
    return result;
  }
  const auto& dtypes = decl.kv_dtypes;
  auto run_case = [&](const std::string& name, const AttentionProblem& p, const KvType& kv, uint64_t seed) {
    // I8 groups: 8 values per scale where head_dim allows, else the whole head.
    const uint32_t group = p.head_dim % 8 == 0 ? 8 : p.head_dim;
    const AttentionOutcome r = check_attention_step(plugin.attention(), p, kv.dtype, 2, seed, group, device.get());
    const double tolerance = decl.tolerance[kv.dtype];
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
    // Attention sinks (API 3.2): alone, inside a window, and covering a whole prefill.
    struct Sinks {
      uint32_t sinks, window;
    };
    for (const Sinks sk : {Sinks{4, 0}, Sinks{3, 7}, Sinks{20, 100}}) {
      for (const KvType& kv : kKvTypes) {
        if (std::find(dtypes.begin(), dtypes.end(), kv.name) == dtypes.end()) continue;
        const std::string name = shape + " sinks " + std::to_string(sk.sinks) +
                                 (sk.window > 0 ? " sliding window " + std::to_string(sk.window) : std::string()) +
                                 " kv " + kv.name;
        if (LLMK_API_VERSION_MINOR(plugin.info().api_version) < 2) {
          result.cases.push_back(CaseResult{name, CaseStatus::unsupported, "", 0, 0,
                                            "built against attention API " +
                                                api_version_text(plugin.info().api_version) +
                                                ", before sinks (3.2)"});
          continue;
        }
        AttentionProblem p{h.num_heads, h.num_kv_heads, h.head_dim, 16, new_tokens, context, sk.window};
        p.sink_tokens = sk.sinks;
        run_case(name, p, kv, h.head_dim * 389 + sk.sinks * 7 + sk.window + kv.dtype);
      }
    }
  }
  return result;
}

}  // namespace llmk::conformance
