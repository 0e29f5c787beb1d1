// The forward pass on F16 and BF16 weights and with an int8 KV cache, on
// stories260K. Reference: the F32 path (itself checked against the float64
// golden vectors) run on the same rounded weight values, so the weight
// rounding cancels and what remains is each path's own arithmetic.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/dtype.hpp"
#include "core/model.hpp"
#include "core/plugin_loader.hpp"
#include "support/prompt_step.hpp"
#include "support/skip.hpp"

namespace {

using namespace llmk;

// A copy of a checkpoint with every weight rounded to `round_to` and stored as `store_as`.
class ConvertedCheckpoint : public Checkpoint {
 public:
  ConvertedCheckpoint(const Checkpoint& src, DType round_to, DType store_as) {
    config_ = src.config();
    config_.dtype = store_as;
    tokenizer_path_ = src.tokenizer_path();
    for (const auto& [name, t] : src.tensors()) {
      const size_t n = static_cast<size_t>(t.numel());
      std::vector<float> f(n);
      convert_to_f32(t.dtype, t.data, f.data(), n);
      auto& bytes = storage_.emplace_back(n * dtype_size(store_as));
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = round_to == DType::f16 ? f32_to_f16(f[i]) : f32_to_bf16(f[i]);
        const float r = round_to == DType::f16 ? f16_to_f32(h) : bf16_to_f32(h);
        if (store_as == DType::f32) std::memcpy(bytes.data() + 4 * i, &r, 4);
        else std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
      TensorView v = t;
      v.dtype = store_as;
      v.data = bytes.data();
      tensors_[name] = v;
    }
  }

 private:
  std::deque<std::vector<uint8_t>> storage_;
};

std::shared_ptr<const Checkpoint> stories() {
  static std::shared_ptr<const Checkpoint> c = load_checkpoint(std::string(LLMK_SHARED_DIR) + "/models/stories260K");
  return c;
}

std::unique_ptr<Model> make_model(std::shared_ptr<const Checkpoint> ckpt, PluginRegistry& plugins,
                                  DType kv = DType::f32, const std::string& linear_options = "{}") {
  EngineConfig cfg;
  cfg.plugins.linear_options = linear_options;
  cfg.executor.num_threads = 2;
  cfg.kv_cache.capacity_tokens = 1024;
  cfg.kv_cache.dtype = kv;
  cfg.kv_cache.group_size = 4;
  return std::make_unique<Model>(ckpt, plugins, cfg, resolve_runtime(cfg, *ckpt));
}

// Logits of every position of one prompt of n tokens (one prefill).
std::vector<float> prefill_logits(Model& model, const std::vector<int32_t>& ids) {
  const StepBatch b = test::whole_prompt_step(ids, 1024);
  const auto n = static_cast<int32_t>(ids.size());
  std::vector<float> logits(static_cast<size_t>(n) * model.config().vocab_size);
  model.forward(b, logits.data());
  return logits;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / den);
}

std::vector<int32_t> prompt(int32_t n) {  // deterministic ids in the vocabulary, after BOS
  std::vector<int32_t> ids{1};
  for (int32_t i = 1; i < n; ++i) ids.push_back(3 + (i * 37) % 500);
  return ids;
}

}  // namespace

TEST_CASE("f16 weights give the f32 result of the same rounded weights, for decode and prefill sizes", "[model]") {
  PluginRegistry plugins{{LLMK_PLUGIN_BUILD_DIR}};
  auto half = std::make_shared<ConvertedCheckpoint>(*stories(), DType::f16, DType::f16);
  auto reference = std::make_shared<ConvertedCheckpoint>(*stories(), DType::f16, DType::f32);
  auto m16 = make_model(half, plugins);
  auto m32 = make_model(reference, plugins);
  for (int32_t n : {1, 3, 13, 40, 200}) {
    INFO(n << " tokens");
    CHECK(rel_l2(prefill_logits(*m16, prompt(n)), prefill_logits(*m32, prompt(n))) < 1e-5);
  }
}

TEST_CASE("bf16 weights give the f32 result of the same rounded weights (panel layout)", "[model]") {
  PluginRegistry plugins{{LLMK_PLUGIN_BUILD_DIR}};
  auto bf = std::make_shared<ConvertedCheckpoint>(*stories(), DType::bf16, DType::bf16);
  auto reference = std::make_shared<ConvertedCheckpoint>(*stories(), DType::bf16, DType::f32);
  auto mbf = make_model(bf, plugins);
  auto m32 = make_model(reference, plugins);
  for (int32_t n : {1, 5, 16, 100}) CHECK(rel_l2(prefill_logits(*mbf, prompt(n)), prefill_logits(*m32, prompt(n))) < 1e-5);
}

TEST_CASE("bf16 rows layout: exact when streaming, bf16-activation accuracy in the oneDNN GEMM", "[model]") {
  PluginRegistry plugins{{LLMK_PLUGIN_BUILD_DIR}};
  auto bf = std::make_shared<ConvertedCheckpoint>(*stories(), DType::bf16, DType::bf16);
  auto reference = std::make_shared<ConvertedCheckpoint>(*stories(), DType::bf16, DType::f32);
  decltype(make_model(bf, plugins)) mbf;
  try {
    mbf = make_model(bf, plugins, DType::f32, R"({"bf16_layout":"rows"})");
  } catch (const std::exception& e) {
    if (std::string(e.what()).find("which this CPU lacks") == std::string::npos) throw;
    LLMK_SKIP(e.what());
  }
  auto m32 = make_model(reference, plugins);
  // Below 16 rows every linear streams the weights: same arithmetic as f32.
  for (int32_t n : {1, 5, 15}) CHECK(rel_l2(prefill_logits(*mbf, prompt(n)), prefill_logits(*m32, prompt(n))) < 1e-5);
  // From 16 rows on activations are rounded to bf16 (relative 2^-9) inside the GEMMs.
  for (int32_t n : {16, 100}) {
    const double err = rel_l2(prefill_logits(*mbf, prompt(n)), prefill_logits(*m32, prompt(n)));
    CHECK(err < 3e-2);
    CHECK(err > 1e-6);  // it really took the bf16 GEMM
  }
}

TEST_CASE("an int8 KV cache stays close to the f32 cache and keeps the argmax", "[model]") {
  PluginRegistry plugins{{LLMK_PLUGIN_BUILD_DIR}};
  auto m8 = make_model(stories(), plugins, DType::i8);
  auto m32 = make_model(stories(), plugins);
  CHECK(m8->kv_cache_bytes() * 2 <= m32->kv_cache_bytes());  // head_dim 8, group 4: 8 + 2 x 4 bytes vs 32
  const std::vector<float> a = prefill_logits(*m8, prompt(120)), b = prefill_logits(*m32, prompt(120));
  CHECK(rel_l2(a, b) < 2e-2);
  const int32_t vocab = m32->config().vocab_size;
  int agree = 0;
  for (int32_t r = 0; r < 120; ++r)
    agree += std::max_element(a.begin() + r * vocab, a.begin() + (r + 1) * vocab) - (a.begin() + r * vocab) ==
             std::max_element(b.begin() + r * vocab, b.begin() + (r + 1) * vocab) - (b.begin() + r * vocab);
  CHECK(agree >= 114);  // 95% of positions
}

TEST_CASE("resolve_runtime derives threads, context and KV slots from the config", "[model]") {
  const ModelConfig& mc = stories()->config();
  EngineConfig cfg;
  ModelRuntime rt = resolve_runtime(cfg, *stories());
  CHECK(rt.num_threads >= 1);
  CHECK(rt.max_seq_len == static_cast<uint32_t>(mc.max_position_embeddings));
  CHECK(rt.max_step_tokens == cfg.scheduler.max_num_batched_tokens);
  CHECK(rt.num_kv_slots > 0);
  CHECK(rt.key_rotation == 0);  // f32 KV: keys stored as computed
  // A share of memory never reserves more than max_num_seqs full-length sequences.
  CHECK(rt.num_kv_slots <= cfg.scheduler.max_num_seqs * rt.max_seq_len);
  cfg.scheduler.max_num_seqs = 2;
  cfg.kv_cache.max_seq_len = 100;
  CHECK(resolve_runtime(cfg, *stories()).num_kv_slots == 200);
  cfg.scheduler.max_num_seqs = 64;
  cfg.kv_cache.max_seq_len = 0;
  // 5 layers x (K + V) x 4 kv heads x 8 dims x 4 bytes = 1280 bytes per token.
  cfg.kv_cache.capacity_bytes = 1280 * 1000 + 5;
  CHECK(resolve_runtime(cfg, *stories()).num_kv_slots == 1000);
  cfg.kv_cache.capacity_tokens = 77;
  cfg.executor.num_threads = 3;
  cfg.kv_cache.max_seq_len = 300;
  rt = resolve_runtime(cfg, *stories());
  CHECK(rt.num_kv_slots == 77);
  CHECK(rt.num_threads == 3);
  CHECK(rt.max_seq_len == 300);
  cfg.kv_cache.dtype = DType::i8;
  CHECK(resolve_runtime(cfg, *stories()).key_rotation == 8);  // head_dim 8: one Hadamard block per head
  cfg.kv_cache.rotate_keys = false;
  CHECK(resolve_runtime(cfg, *stories()).key_rotation == 0);
  cfg.kv_cache.group_size = 3;  // does not divide head_dim 8
  CHECK_THROWS_WITH(resolve_runtime(cfg, *stories()), Catch::Contains("group_size"));
}

TEST_CASE("the model rejects a step that breaks the batch contract", "[model]") {
  PluginRegistry plugins{{LLMK_PLUGIN_BUILD_DIR}};
  auto m = make_model(stories(), plugins);
  StepBatch b;
  b.token_ids = {1, 600};  // 600 is outside the 512-token vocabulary
  b.positions = {0, 1};
  b.slot_mapping = {0, 1};
  b.query_start = {0, 2};
  b.context_lens = {2};
  b.block_tables = {0};
  b.max_blocks_per_seq = 1;
  b.block_size = 64;
  b.logits_rows = {1};
  std::vector<float> logits(512);
  CHECK_THROWS_WITH(m->forward(b, logits.data()), Catch::Contains("vocabulary"));
  b.token_ids[1] = 5;
  b.block_tables = {1023};  // two positions from slot 1023: past the 1024 slots
  CHECK_THROWS_WITH(m->forward(b, logits.data()), Catch::Contains("outside"));
}
