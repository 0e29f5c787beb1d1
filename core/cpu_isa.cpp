#include "core/cpu_isa.hpp"

#include <cstdlib>
#include <fstream>

#include "core/error.hpp"

#ifndef LLMK_CPU_VARIANTS_BUILT
#define LLMK_CPU_VARIANTS_BUILT ""
#endif
#ifndef LLMK_CPU_BASELINE
#define LLMK_CPU_BASELINE "-march=native, for the CPU it was built on"
#endif

namespace llmk {
namespace {

struct Feature {
  std::string_view name;
  bool present;
};

// What the CPU and its operating system support: libgcc's probe also checks
// that the kernel saves the AVX and AVX-512 register state.
const std::vector<Feature>& cpu_features() {
  static const std::vector<Feature> features = [] {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return std::vector<Feature>{
        {"avx2", __builtin_cpu_supports("avx2") != 0},
        {"fma", __builtin_cpu_supports("fma") != 0},
        {"f16c", __builtin_cpu_supports("f16c") != 0},
        {"avx512f", __builtin_cpu_supports("avx512f") != 0},
        {"avx512bw", __builtin_cpu_supports("avx512bw") != 0},
        {"avx512cd", __builtin_cpu_supports("avx512cd") != 0},
        {"avx512dq", __builtin_cpu_supports("avx512dq") != 0},
        {"avx512vl", __builtin_cpu_supports("avx512vl") != 0},
        {"avx512bf16", __builtin_cpu_supports("avx512bf16") != 0},
        {"avx512vnni", __builtin_cpu_supports("avx512vnni") != 0},
    };
#else
    return std::vector<Feature>{};
#endif
  }();
  return features;
}

bool has_feature(std::string_view name) {
  for (const auto& f : cpu_features())
    if (f.name == name) return f.present;
  return false;
}

}  // namespace

const std::vector<CpuIsaLevel>& cpu_isa_levels() {
  static const std::vector<CpuIsaLevel> levels = [] {
    std::vector<CpuIsaLevel> out;
#if defined(__x86_64__) && defined(LLMK_CPU_DISPATCH)
    const std::vector<std::string_view> v4 = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512cd", "avx512dq",
                                              "avx512vl"};
    std::vector<std::string_view> bf16 = v4;
    bf16.push_back("avx512bf16");
    bf16.push_back("avx512vnni");
    out.push_back({"avx512bf16", "x86-64-v4 with AVX512_BF16 and AVX512_VNNI", bf16});
    out.push_back({"avx512", "x86-64-v4: AVX-512 F, BW, CD, DQ, VL", v4});
#endif
    out.push_back({"", LLMK_CPU_BASELINE, {}});
    return out;
  }();
  return levels;
}

std::vector<std::string> cpu_isa_levels_built() {
  std::vector<std::string> out;
  std::string_view list = LLMK_CPU_VARIANTS_BUILT;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    if (!item.empty()) out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return out;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

std::string cpu_isa_display_name(const CpuIsaLevel& level) {
  return level.name.empty() ? std::string("baseline") : std::string(level.name);
}

const CpuIsaLevel& cpu_isa_level(std::string_view name) {
  if (name == "baseline") name = "";
  std::string known;
  for (const auto& level : cpu_isa_levels()) {
    if (level.name == name) return level;
    known += (known.empty() ? "" : ", ") + cpu_isa_display_name(level);
  }
  throw Error(ErrorCode::invalid_config,
              "unknown CPU instruction-set level '" + std::string(name) + "' (this build has: " + known + ")");
}

std::vector<std::string_view> cpu_isa_missing(const CpuIsaLevel& level) {
  std::vector<std::string_view> missing;
  for (const auto feature : level.features)
    if (!has_feature(feature)) missing.push_back(feature);
  return missing;
}

bool cpu_supports(const CpuIsaLevel& level) { return cpu_isa_missing(level).empty(); }

std::string cpu_isa_missing_text(const CpuIsaLevel& level) {
  std::string out;
  for (const auto feature : cpu_isa_missing(level)) out += (out.empty() ? "" : ", ") + std::string(feature);
  return out;
}

const CpuIsaLevel& cpu_isa_cap() {
  const char* env = std::getenv("LLMK_CPU_ISA");
  if (env == nullptr || env[0] == '\0') return cpu_isa_levels().front();
  try {
    return cpu_isa_level(env);
  } catch (const Error& e) {
    throw Error(ErrorCode::invalid_config, std::string("LLMK_CPU_ISA: ") + e.what());
  }
}

std::vector<const CpuIsaLevel*> cpu_isa_candidates() {
  const CpuIsaLevel& cap = cpu_isa_cap();
  std::vector<const CpuIsaLevel*> out;
  bool at_or_below_cap = false;
  for (const auto& level : cpu_isa_levels()) {
    if (&level == &cap) at_or_below_cap = true;
    if (at_or_below_cap && cpu_supports(level)) out.push_back(&level);
  }
  return out;
}

}  // namespace llmk
