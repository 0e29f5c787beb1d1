// Run-time values derived from the engine config and the model: threads,
// context limit, step size, KV slots.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "core/model_runtime.hpp"

#include "core/checkpoint.hpp"
#include "core/error.hpp"
#include "core/hw_probe.hpp"
#include "kernels/cpu/hadamard.hpp"

namespace llmk {

namespace {

// Physical cores this process may run on: CPUs of the affinity mask,
// SMT siblings counted once (from sysfs topology); the affinity count when
// the topology cannot be read.
uint32_t hardware_cores() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return std::max(1u, std::thread::hardware_concurrency());
  std::set<std::pair<int, int>> cores;
  int allowed = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &mask)) continue;
    ++allowed;
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::ifstream package(dir + "physical_package_id"), core(dir + "core_id");
    int package_id = 0, core_id = 0;
    if (!(package >> package_id) || !(core >> core_id)) return static_cast<uint32_t>(std::max(1, CPU_COUNT(&mask)));
    cores.emplace(package_id, core_id);
  }
  return static_cast<uint32_t>(std::max<size_t>(1, std::min<size_t>(cores.size(), allowed)));
}

}  // namespace

uint64_t standard_kv_bytes_per_token(const ModelConfig& m, DType kv_dtype, uint32_t group) {
  const int64_t elems = static_cast<int64_t>(m.num_kv_heads) * m.head_dim;
  const int64_t layer = kv_dtype == DType::i8 ? 2 * (elems + elems / group * 4)
                                              : 2 * elems * static_cast<int64_t>(dtype_size(kv_dtype));
  return static_cast<uint64_t>(m.num_layers) * static_cast<uint64_t>(layer);
}

uint32_t kv_slots_for(const EngineConfig& cfg, uint32_t max_seq_len, uint64_t per_token, uint64_t memory_bytes) {
  uint64_t slots = 0;
  if (cfg.kv_cache.capacity_tokens > 0) {
    slots = cfg.kv_cache.capacity_tokens;
  } else if (cfg.kv_cache.capacity_bytes > 0) {
    slots = cfg.kv_cache.capacity_bytes / per_token;
  } else {
    slots = static_cast<uint64_t>(cfg.kv_cache.capacity_fraction * static_cast<double>(memory_bytes)) / per_token;
    // A share of memory is a budget, not a request: never more than every
    // running sequence at full length can use (a tiny model would otherwise
    // reserve gigabytes it cannot fill).
    slots = std::min<uint64_t>(slots, static_cast<uint64_t>(cfg.scheduler.max_num_seqs) * max_seq_len);
  }
  slots = std::min<uint64_t>(slots, 0x7fffffffu);  // slots are int32 in the step plan
  if (slots == 0)
    throw Error(ErrorCode::invalid_config, "kv_cache: the configured capacity holds no token (" +
                                               std::to_string(per_token) + " bytes per token)");
  return static_cast<uint32_t>(slots);
}

KvDtypeChoice resolve_kv_dtype(const EngineConfig& cfg, const ModelConfig& model, std::string_view load_format) {
  if (cfg.kv_cache.dtype) return {*cfg.kv_cache.dtype, "kv_cache.dtype"};
  if (load_format == "gguf") return {DType::f16, "auto: GGUF"};
  switch (model.dtype) {
    case DType::bf16:
      if (cfg.executor.device == "cpu") return {DType::f16, "auto: BF16 checkpoint, no bf16 cache on the CPU"};
      return {DType::bf16, "auto: BF16 checkpoint"};
    case DType::f16:
      return {DType::f16, "auto: F16 checkpoint"};
    default:
      return {DType::f32, "auto: F32 checkpoint"};
  }
}

void check_stream_window(const EngineConfig& cfg, const ModelConfig& model, uint32_t max_seq_len) {
  const uint32_t window = cfg.kv_cache.window;
  if (window == 0) return;
  if (window > max_seq_len)
    throw Error(ErrorCode::invalid_config, "kv_cache.window (" + std::to_string(window) +
                                               ") exceeds the context length (" + std::to_string(max_seq_len) +
                                               "): positions within the cache must stay below it");
  // Positions within the cache stay below the window, so a window no wider
  // than the model's own sliding window never hides a sink; a wider one would.
  if (model.sliding_window && window > static_cast<uint32_t>(*model.sliding_window))
    throw Error(ErrorCode::invalid_config, "kv_cache.window (" + std::to_string(window) +
                                               ") exceeds the model's own sliding window (" +
                                               std::to_string(*model.sliding_window) +
                                               "), which would hide the sinks from later queries");
}

ModelRuntime resolve_runtime(const EngineConfig& cfg, const Checkpoint& checkpoint) {
  return resolve_runtime(cfg, checkpoint.config(), checkpoint.format(),
                         static_cast<uint64_t>(physical_memory_bytes()));
}

ModelRuntime resolve_runtime(const EngineConfig& cfg, const ModelConfig& model, std::string_view load_format,
                             uint64_t memory_bytes) {
  ModelRuntime rt;
  rt.num_threads = cfg.executor.num_threads > 0 ? static_cast<uint32_t>(cfg.executor.num_threads) : hardware_cores();
  rt.max_seq_len = cfg.kv_cache.max_seq_len > 0 ? cfg.kv_cache.max_seq_len
                                                : static_cast<uint32_t>(model.max_position_embeddings);
  rt.max_step_tokens = std::max<uint32_t>(1, cfg.scheduler.max_num_batched_tokens);
  const KvDtypeChoice kv = resolve_kv_dtype(cfg, model, load_format);
  rt.kv_dtype = kv.dtype;
  rt.kv_dtype_reason = kv.reason;
  rt.kv_group_size = cfg.kv_cache.group_size;
  rt.prefault_kv = cfg.kv_cache.prefault;
  if (rt.kv_dtype == DType::i8 && cfg.kv_cache.rotate_keys && kernels::cpu::largest_pow2_divisor(model.head_dim) > 1)
    rt.key_rotation = static_cast<uint32_t>(kernels::cpu::largest_pow2_divisor(model.head_dim));
  if (rt.kv_dtype != DType::f32 && rt.kv_dtype != DType::f16 && rt.kv_dtype != DType::bf16 && rt.kv_dtype != DType::i8)
    throw Error(ErrorCode::invalid_config,
                std::string("kv_cache.dtype must be f32, f16, bf16 or i8, got ") + dtype_name(rt.kv_dtype));
  if (rt.kv_dtype == DType::i8 && (rt.kv_group_size == 0 || model.head_dim % rt.kv_group_size != 0))
    throw Error(ErrorCode::invalid_config, "kv_cache.group_size (" + std::to_string(rt.kv_group_size) +
                                               ") must divide head_dim (" + std::to_string(model.head_dim) + ")");
  rt.num_kv_slots = kv_slots_for(cfg, rt.max_seq_len, standard_kv_bytes_per_token(model, rt.kv_dtype, rt.kv_group_size),
                                 memory_bytes);
  check_stream_window(cfg, model, rt.max_seq_len);
  return rt;
}

}  // namespace llmk
