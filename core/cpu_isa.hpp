// Instruction-set levels of the CPU plugins, chosen at run time.
//
// A CPU plugin (attention.cpu, linear.dense, linear.int8, linear.int4,
// linear.uint8_zp) is built once per level. The plain library file is the
// build's baseline level; each higher level sits beside it with the level's
// name before the extension:
//
//   libllmk_linear_int4.so              baseline (x86-64-v3: AVX2, FMA, F16C)
//   libllmk_linear_int4.avx512.so       x86-64-v4 (AVX-512 F/BW/CD/DQ/VL)
//   libllmk_linear_int4.avx512bf16.so   x86-64-v4 plus AVX512_BF16 and AVX512_VNNI
//
// The plugin loader takes the highest level this CPU (and its operating
// system) supports, never reading a library whose instructions the CPU lacks.
// LLMK_CPU_ISA=<level> caps the choice, the way ONEDNN_MAX_CPU_ISA caps
// oneDNN's: to A/B-test levels on one machine, or to rule one out.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace llmk {

struct CpuIsaLevel {
  std::string_view name;         // file-name suffix; "" for the baseline file
  std::string_view description;  // what the level's code may use
  std::vector<std::string_view> features;  // CPU features it needs (names as in /proc/cpuinfo-like lists)
};

// Every level the loader knows, highest first; the last is the baseline.
const std::vector<CpuIsaLevel>& cpu_isa_levels();

// The level named `name` ("avx512"; "baseline" or "" is the baseline).
// Throws Error(invalid_config) naming the known levels when there is none.
const CpuIsaLevel& cpu_isa_level(std::string_view name);

// Features of `level` this CPU lacks (empty: it may run the level's code).
std::vector<std::string_view> cpu_isa_missing(const CpuIsaLevel& level);
bool cpu_supports(const CpuIsaLevel& level);
// Those features as one line, "avx512f, avx512bw" (empty when none is missing).
std::string cpu_isa_missing_text(const CpuIsaLevel& level);

// The highest level the loader may choose: LLMK_CPU_ISA when set (validated,
// throws Error(invalid_config) for an unknown name), else the highest level there is.
const CpuIsaLevel& cpu_isa_cap();

// Levels the loader tries, highest first: those this CPU supports, at or
// below the cap. Always ends with the baseline.
std::vector<const CpuIsaLevel*> cpu_isa_candidates();

// The levels this build made plugin files for (besides the baseline).
std::vector<std::string> cpu_isa_levels_built();

// The CPU's model name as the kernel reports it ("" when it does not).
std::string cpu_model_name();

// The printable name of a level ("baseline" for the baseline's empty suffix).
std::string cpu_isa_display_name(const CpuIsaLevel& level);

}  // namespace llmk
