// kv_cache.dtype: auto follows the checkpoint (f16 for GGUF, else the
// weights' storage type), an explicit type wins, and the resolved type is
// what the executor allocates its cache in.
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/cpu_executor.hpp"
#include "core/error.hpp"
#include "core/executor.hpp"
#include "core/gguf_checkpoint.hpp"
#include "core/gguf_test_support.hpp"
#include "core/model_runtime.hpp"
#include "core/plugin_loader.hpp"
#include "core/safetensors_writer.hpp"
#include "support/skip.hpp"

using namespace llmk;
using namespace llmk::test;
using Catch::Contains;

namespace {

const std::string kStories = std::string(LLMK_SHARED_DIR) + "/models/stories260K";

EngineConfig small_config(std::initializer_list<const char*> overrides = {}) {
  EngineConfig cfg;
  cfg.executor.num_threads = 1;
  cfg.kv_cache.capacity_tokens = 64;
  cfg.scheduler.max_num_batched_tokens = 16;
  for (const char* o : overrides) apply_override(cfg, o);
  return cfg;
}

// Bytes of a cache of `slots` tokens in `dtype`, counted from the shape:
// K and V, every layer, every KV head, head_dim elements.
uint64_t cache_bytes(const ModelConfig& m, uint32_t slots, size_t dtype_bytes) {
  return uint64_t{2} * static_cast<uint64_t>(m.num_layers) * static_cast<uint64_t>(m.num_kv_heads) *
         static_cast<uint64_t>(m.head_dim) * slots * dtype_bytes;
}

// A safetensors model directory whose weights and torch_dtype are `dtype`.
std::shared_ptr<const Checkpoint> tiny_checkpoint(const TempDir& dir, DType dtype) {
  ModelConfig c = tiny_llama_config();
  c.dtype = dtype;
  write_model_dir(dir.path(), c, 7);
  return load_checkpoint(dir.path());
}

}  // namespace

TEST_CASE("kv_cache.dtype is auto unless set, and reads back as auto", "[config][kv_dtype]") {
  CHECK_FALSE(EngineConfig{}.kv_cache.dtype.has_value());
  EngineConfig cfg = small_config({"kv_cache.dtype=f16"});
  CHECK(cfg.kv_cache.dtype == DType::f16);
  apply_override(cfg, "kv_cache.dtype=auto");
  CHECK_FALSE(cfg.kv_cache.dtype.has_value());
  CHECK_THAT(to_yaml(cfg), Contains("dtype: auto"));
  CHECK_NOTHROW(validate(cfg));
}

TEST_CASE("an unknown kv_cache.dtype is refused naming the key and the allowed values", "[config][kv_dtype]") {
  EngineConfig cfg;
  try {
    apply_override(cfg, "kv_cache.dtype=fp8");
    FAIL("fp8 was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_config);
    CHECK_THAT(e.what(), Contains("kv_cache.dtype") && Contains("'fp8'") && Contains("auto, f32, f16, bf16, i8"));
  }
  cfg.kv_cache.dtype = DType::u8;  // a known dtype, but no cache type
  CHECK_THROWS_WITH(validate(cfg), Contains("kv_cache.dtype") && Contains("'u8'") &&
                                       Contains("auto, f32, f16, bf16, i8"));
}

TEST_CASE("auto gives the F32 stories260K an f32 cache", "[kv_dtype]") {
  const std::shared_ptr<const Checkpoint> ckpt = load_checkpoint(kStories);
  REQUIRE(ckpt->config().dtype == DType::f32);
  const ModelRuntime rt = resolve_runtime(small_config(), *ckpt);
  CHECK(rt.kv_dtype == DType::f32);
  CHECK(rt.kv_dtype_reason == "auto: F32 checkpoint");
  PluginRegistry plugins{{LLMK_PLUGIN_BUILD_DIR}};
  const auto executor = make_cpu_executor(small_config(), ckpt, plugins);
  CHECK(executor->runtime().kv_dtype == DType::f32);
  CHECK(executor->kv_cache_bytes() == cache_bytes(ckpt->config(), executor->runtime().num_kv_slots, 4));
}

TEST_CASE("auto gives a GGUF file an f16 cache, whatever its tensors' types", "[kv_dtype][gguf]") {
  if (!have_gguf_python()) LLMK_SKIP("the project venv with PyPI gguf is absent");
  TempDir dir;
  PluginRegistry plugins{{LLMK_PLUGIN_BUILD_DIR}};
  // An F32 GGUF (weights as the F32 safetensors) and a Q8_0 one (blocks as stored).
  for (const std::string kind : {"f32", "q8_0"}) {
    INFO(kind);
    const std::filesystem::path file = dir.path() / ("stories260K-" + kind + ".gguf");
    REQUIRE(run_gguf_writer("stories " + kStories + " " + file.string() + " " + kind));
    const std::shared_ptr<const Checkpoint> ckpt = load_gguf_checkpoint(file);
    CHECK(ckpt->format() == "gguf");
    CHECK(ckpt->config().dtype == (kind == "f32" ? DType::f32 : ggml_dtype(8)));  // not what auto reads for a GGUF
    const ModelRuntime rt = resolve_runtime(small_config(), *ckpt);
    CHECK(rt.kv_dtype == DType::f16);
    CHECK(rt.kv_dtype_reason == "auto: GGUF");
    // The executor allocates the resolved type: 2 bytes per element.
    const auto executor = make_cpu_executor(small_config(), ckpt, plugins);
    CHECK(executor->runtime().kv_dtype == DType::f16);
    CHECK(executor->kv_cache_bytes() == cache_bytes(ckpt->config(), executor->runtime().num_kv_slots, 2));
    // An explicit type overrides auto.
    const ModelRuntime pinned = resolve_runtime(small_config({"kv_cache.dtype=f32"}), *ckpt);
    CHECK(pinned.kv_dtype == DType::f32);
    CHECK(pinned.kv_dtype_reason == "kv_cache.dtype");
    const auto pinned_executor = make_cpu_executor(small_config({"kv_cache.dtype=f32"}), ckpt, plugins);
    CHECK(pinned_executor->kv_cache_bytes() ==
          cache_bytes(ckpt->config(), pinned_executor->runtime().num_kv_slots, 4));
  }
}

TEST_CASE("auto gives a BF16 checkpoint a bf16 cache, and f16 on the CPU", "[kv_dtype]") {
  TempDir dir;
  const auto ckpt = tiny_checkpoint(dir, DType::bf16);
  REQUIRE(ckpt->format() == "safetensors");
  const ModelRuntime gpu = resolve_runtime(small_config({"executor.device=cuda"}), ckpt->config(), ckpt->format(),
                                           uint64_t{1} << 30);
  CHECK(gpu.kv_dtype == DType::bf16);
  CHECK(gpu.kv_dtype_reason == "auto: BF16 checkpoint");
  // attention.cpu keeps f32, f16 or i8: the CPU gets the 2-byte type it has.
  const ModelRuntime cpu = resolve_runtime(small_config(), *ckpt);
  CHECK(cpu.kv_dtype == DType::f16);
  CHECK_THAT(cpu.kv_dtype_reason, Contains("auto: BF16 checkpoint") && Contains("CPU"));
  PluginRegistry plugins{{LLMK_PLUGIN_BUILD_DIR}};
  const auto executor = make_cpu_executor(small_config(), ckpt, plugins);  // attention.cpu accepts it
  CHECK(executor->runtime().kv_dtype == DType::f16);
  CHECK(executor->kv_cache_bytes() == cache_bytes(ckpt->config(), executor->runtime().num_kv_slots, 2));
  // Explicit types win on either device.
  CHECK(resolve_runtime(small_config({"kv_cache.dtype=i8", "kv_cache.group_size=4"}), *ckpt).kv_dtype == DType::i8);
  CHECK(resolve_runtime(small_config({"kv_cache.dtype=f32", "executor.device=cuda"}), ckpt->config(),
                        ckpt->format(), uint64_t{1} << 30)
            .kv_dtype == DType::f32);
}

TEST_CASE("auto gives an F16 checkpoint an f16 cache", "[kv_dtype]") {
  TempDir dir;
  const auto ckpt = tiny_checkpoint(dir, DType::f16);
  const ModelRuntime rt = resolve_runtime(small_config(), *ckpt);
  CHECK(rt.kv_dtype == DType::f16);
  CHECK(rt.kv_dtype_reason == "auto: F16 checkpoint");
  CHECK(resolve_runtime(small_config({"kv_cache.dtype=f32"}), *ckpt).kv_dtype == DType::f32);
}

TEST_CASE("auto follows a dummy preset's dtype", "[kv_dtype][dummy]") {
  EngineConfig cfg = small_config();
  CHECK(resolve_kv_dtype(cfg, *model_preset("llama-110m"), "dummy").dtype == DType::f32);
  CHECK(resolve_kv_dtype(cfg, *model_preset("tinyllama-1.1b"), "dummy").dtype == DType::f16);
  CHECK(resolve_kv_dtype(cfg, *model_preset("llama3-8b"), "dummy").dtype == DType::f16);  // BF16 on the CPU
  cfg.executor.device = "cuda";
  CHECK(resolve_kv_dtype(cfg, *model_preset("llama3-8b"), "dummy").dtype == DType::bf16);
}
