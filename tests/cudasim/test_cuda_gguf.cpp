// A GGUF file's quantized weights on the CUDA executor (simulated in CI): no
// CUDA plugin computes on ggml blocks, so each is dequantized to F32 at load
// for plugins.linear (fused layers whose parts differ in type become one F32
// weight), and the embedding's blocks are decoded once at upload. A model
// mixing fifteen quantized types then gives its F32 twin's logits (the
// twin holds PyPI gguf's dequantization of exactly those blocks).
#include "test_support.hpp"

#if !defined(LLMK_CUDASIM_PLUGIN_DIR)
#include "support/skip.hpp"
TEST_CASE("a quantized GGUF on the simulated CUDA executor needs the simulated plugins", "[cuda_executor][gguf]") {
  LLMK_SKIP("this build has no simulated CUDA plugins (tests/cudasim_plugins)");
}
#else
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/cuda/cuda_executor.hpp"
#include "core/gguf_checkpoint.hpp"
#include "core/gguf_test_support.hpp"
#include "core/plugin_loader.hpp"
#include "core/safetensors_writer.hpp"
#include "support/golden.hpp"
#include "support/prompt_step.hpp"
#include "support/skip.hpp"

namespace {

using namespace llmk;

// Every row's logits of one prefill of `ids` through the CUDA executor.
std::vector<float> cuda_logits(std::shared_ptr<const Checkpoint> checkpoint, const std::vector<int32_t>& ids) {
  cudasim_test::reset_simulator(1);
  PluginRegistry plugins{{LLMK_CUDASIM_PLUGIN_DIR}};
  EngineConfig cfg;
  cfg.executor.device = "cuda";
  cfg.kv_cache.capacity_tokens = 256;
  cfg.kv_cache.dtype = DType::f32;
  cfg.scheduler.max_num_batched_tokens = 64;
  cfg.plugins.linear = "linear.cublas";
  cfg.plugins.linear_options = R"({"dtype":"f32"})";
  cfg.plugins.attention = "attention.cuda";
  const std::unique_ptr<Executor> executor = make_cuda_executor(cfg, checkpoint, plugins);
  const StepBatch b = test::whole_prompt_step(ids, 256);
  const LogitsView view = executor->execute(b);
  if (view.ready.event != nullptr) CUDA_REQUIRE(cudaEventSynchronize(static_cast<cudaEvent_t>(view.ready.event)));
  std::vector<float> host(static_cast<size_t>(view.num_rows) * view.vocab_size);
  for (int32_t r = 0; r < view.num_rows; ++r)
    CUDA_REQUIRE(cudaMemcpy(host.data() + static_cast<size_t>(r) * view.vocab_size, view.row(r),
                            static_cast<size_t>(view.vocab_size) * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace

TEST_CASE("a GGUF mixing fifteen quantized types runs on the simulated CUDA executor as its F32 twin",
          "[cuda_executor][gguf]") {
  if (!test::have_gguf_python()) LLMK_SKIP("the project venv with PyPI gguf is absent");
  test::TempDir dir;
  const std::filesystem::path quant_file = dir.path() / "kq.gguf", f32_file = dir.path() / "kf.gguf";
  REQUIRE(test::run_gguf_writer("kquant " + quant_file.string() + " " + f32_file.string()));
  std::shared_ptr<const Checkpoint> quant = load_gguf_checkpoint(quant_file);
  std::shared_ptr<const Checkpoint> f32 = load_gguf_checkpoint(f32_file);
  REQUIRE(is_ggml_dtype(quant->tensor("model.embed_tokens.weight").dtype));  // Q6_K blocks, decoded at upload
  const std::vector<int32_t> ids = {1, 5, 9, 33, 2, 63, 17, 40};
  const std::vector<float> a = cuda_logits(quant, ids), b = cuda_logits(f32, ids);
  REQUIRE(a.size() == b.size());
  const std::vector<double> want(b.begin(), b.end());
  // The same F32 weights through the same kernels: equal to rounding.
  CHECK(test::rel_l2(a.data(), want) < 1e-6);
}

#endif  // LLMK_CUDASIM_PLUGIN_DIR
