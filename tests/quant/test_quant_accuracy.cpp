// Accuracy gates of the quantized modes on stories260K against the float
// model: top-1 agreement of next-token predictions at every position, mean
// KL divergence of the next-token distributions, and perplexity of a fixed
// 500-token greedy text (tests/quant/fixtures/stories260K_greedy.txt). Every
// sequence runs twice: as one prefill step (GEMM kernels) and one token per
// step (GEMV kernels, KV cache read back at every step).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/model.hpp"
#include "core/plugin_loader.hpp"
#include "core/step.hpp"

namespace {

struct Mode {
  const char* name;
  const char* linear;
  const char* options;
  llmk::DType kv_dtype;
  uint32_t kv_group_size = 8;
  bool rotate_keys = true;
};

std::vector<int32_t> fixture_ids() {
  std::ifstream in(LLMK_SOURCE_DIR "/tests/quant/fixtures/stories260K_greedy.txt");
  REQUIRE(in.good());
  std::string line;
  std::getline(in, line);
  std::istringstream ids(line);
  std::vector<int32_t> out;
  for (int32_t id; ids >> id;) out.push_back(id);
  return out;
}

std::vector<std::vector<int32_t>> golden_prompts() {
  std::ifstream in(LLMK_SHARED_DIR "/golden/stories260K.json");
  REQUIRE(in.good());
  const auto j = nlohmann::json::parse(in);
  std::vector<std::vector<int32_t>> out;
  for (const auto& c : j["cases"]) {
    // The prompt followed by its greedy continuation: every position counts.
    std::vector<int32_t> ids = c["input_ids"].get<std::vector<int32_t>>();
    for (const auto& t : c["greedy_ids"]) ids.push_back(t.get<int32_t>());
    out.push_back(ids);
  }
  return out;
}

class Runner {
 public:
  explicit Runner(const Mode& mode) : registry_({LLMK_PLUGIN_BUILD_DIR}) {
    llmk::EngineConfig cfg;
    cfg.plugins.linear = mode.linear;
    cfg.plugins.linear_options = mode.options;
    cfg.kv_cache.dtype = mode.kv_dtype;
    cfg.kv_cache.group_size = mode.kv_group_size;
    cfg.kv_cache.rotate_keys = mode.rotate_keys;
    cfg.kv_cache.capacity_tokens = 512;
    cfg.scheduler.max_num_batched_tokens = 512;
    cfg.executor.num_threads = 1;  // kernel tests cover the threaded paths; one thread keeps this quick on a busy machine
    checkpoint_ = std::shared_ptr<const llmk::Checkpoint>(llmk::load_checkpoint(LLMK_SHARED_DIR "/models/stories260K"));
    model_ = std::make_unique<llmk::Model>(checkpoint_, registry_, cfg,
                                           llmk::resolve_runtime(cfg, *checkpoint_));
  }

  // Logits after each token of ids: [ids.size(), vocab], from one prefill step
  // (decode = false) or one step per token (decode = true).
  std::vector<float> logits(const std::vector<int32_t>& ids, bool decode) {
    const int32_t n = static_cast<int32_t>(ids.size()), vocab = checkpoint_->config().vocab_size;
    std::vector<float> out(static_cast<size_t>(n) * vocab);
    const int32_t step = decode ? 1 : n;
    for (int32_t first = 0; first < n; first += step) {
      llmk::StepBatch b;
      for (int32_t p = first; p < first + step; ++p) {
        b.token_ids.push_back(ids[p]);
        b.positions.push_back(p);
        b.slot_mapping.push_back(p);
        b.logits_rows.push_back(p - first);
      }
      b.query_start = {0, step};
      b.context_lens = {first + step};
      b.block_tables = {0};
      b.max_blocks_per_seq = 1;
      b.block_size = 512;
      model_->forward(b, out.data() + static_cast<size_t>(first) * vocab);
    }
    return out;
  }

  int32_t vocab() const { return checkpoint_->config().vocab_size; }
  size_t weight_bytes() const { return model_->weight_bytes(); }
  size_t kv_cache_bytes() const { return model_->kv_cache_bytes(); }

 private:
  llmk::PluginRegistry registry_;
  std::shared_ptr<const llmk::Checkpoint> checkpoint_;
  std::unique_ptr<llmk::Model> model_;
};

std::vector<double> log_softmax(const float* z, int32_t n) {
  const double m = *std::max_element(z, z + n);
  double s = 0.0;
  for (int32_t i = 0; i < n; ++i) s += std::exp(z[i] - m);
  std::vector<double> out(n);
  for (int32_t i = 0; i < n; ++i) out[i] = z[i] - m - std::log(s);
  return out;
}

struct Metrics {
  int64_t positions = 0, agree = 0;
  double kl_sum = 0.0;
  double nll_sum = 0.0;  // fixture only
  int64_t nll_count = 0;
  void add(const std::vector<float>& ref, const std::vector<float>& got, int32_t vocab, const std::vector<int32_t>* ids) {
    const int64_t n = static_cast<int64_t>(ref.size() / vocab);
    for (int64_t p = 0; p < n; ++p) {
      const float* r = ref.data() + p * vocab;
      const float* g = got.data() + p * vocab;
      agree += std::max_element(r, r + vocab) - r == std::max_element(g, g + vocab) - g;
      const auto lr = log_softmax(r, vocab), lg = log_softmax(g, vocab);
      double kl = 0.0;
      for (int32_t i = 0; i < vocab; ++i) kl += std::exp(lr[i]) * (lr[i] - lg[i]);
      kl_sum += kl;
      ++positions;
      if (ids != nullptr && p + 1 < n) {
        nll_sum -= lg[(*ids)[p + 1]];
        ++nll_count;
      }
    }
  }
  double top1() const { return double(agree) / double(positions); }
  double mean_kl() const { return kl_sum / double(positions); }
  double perplexity() const { return std::exp(nll_sum / double(nll_count)); }
};

}  // namespace

TEST_CASE("Quantized modes agree with the float model on stories260K within their gates", "[quant][accuracy]") {
  const std::vector<int32_t> text = fixture_ids();
  REQUIRE(text.size() == 501);
  std::vector<std::vector<int32_t>> seqs = golden_prompts();
  seqs.push_back(text);
  const size_t text_index = seqs.size() - 1;

  const Mode float_mode{"float", "linear.dense", "{}", llmk::DType::f32};
  Runner ref(float_mode);
  std::vector<std::vector<float>> ref_prefill, ref_decode;
  for (const auto& s : seqs) {
    ref_prefill.push_back(ref.logits(s, false));
    ref_decode.push_back(ref.logits(s, true));
  }

  // The fixture is the float model's own greedy text: it predicts it back.
  Metrics self;
  {
    const int32_t vocab = ref.vocab();
    int64_t hits = 0;
    for (size_t p = 0; p + 1 < text.size(); ++p) {
      const float* z = ref_prefill[text_index].data() + p * vocab;
      hits += std::max_element(z, z + vocab) - z == text[p + 1];
    }
    REQUIRE(double(hits) / double(text.size() - 1) >= 0.99);
    self.add(ref_prefill[text_index], ref_prefill[text_index], vocab, &text);
  }
  std::printf("\nstories260K accuracy vs float (%zu sequences, %zu fixture tokens)\n", seqs.size(), text.size());
  std::printf("%-24s %9s %9s %11s %11s %9s %12s %10s\n", "mode", "top1_pf", "top1_dec", "kl_pf", "kl_dec", "ppl",
              "weight_B", "kv_B");
  std::printf("%-24s %9.4f %9.4f %11.2e %11.2e %9.3f %12zu %10zu\n", "float", 1.0, 1.0, 0.0, 0.0, self.perplexity(),
              ref.weight_bytes(), ref.kv_cache_bytes());

  // Gates (in brackets: measured top-1 / mean KL, prefill and decode alike,
  // one thread). Targets: int8 KV >= 0.99, W8A8 >= 0.97, int4 >= 0.90.
  //
  // int8 KV, group 8 (the default, keys Hadamard-rotated): 0.991, KL 4.8e-4;
  // 7 of 788 positions flip, the most the 0.99 gate allows. stories260K has
  // head_dim 8, so group 8 is one scale per head and token, the coarsest the
  // scheme allows. The loss is K's (V alone: KL 4e-6), and decode, which
  // reads every earlier token back from the cache, cannot avoid it. Without
  // the rotation one large key channel sets each head's scale: 0.986, KL
  // 8.8e-4 (11 flips, at float top-two margins of 0.002 to 0.15 logits; 5% of
  // all positions have margins under 0.15). The engine adds nothing to the
  // scheme's own error: storing f32 K/V rounded through the same int8 groups
  // gives the same figures. Group 4 gains nothing from a rotation over both
  // of its groups.
  //
  // int4 at the default group (128, capped at in_features: one group per row
  // of 64 weights, groups of 128 and 44 on down_proj's rows of 172): 0.859 with MSE ranges (0.841 with min/max ones, as
  // a float64 NumPy model with the same weights also gives), under its target.
  // Its flips are not near-ties (margins up to 2.6 logits): per-row int4 on a
  // 64-wide model is simply coarse. Keeping lm_head in float gives 0.879;
  // groups of 16 with lm_head in float meet the target at 37% of the float
  // weight bytes. Rows rounded to int8 per group (the default) lose nothing
  // against exact f32 ones here (0.863 against 0.859 top-1). (Before int8
  // rows: 0.859 / 0.841 / 0.879 / 0.920 for the four int4 rows below.)
  struct Gate {
    Mode mode;
    double min_top1;
    double max_kl;
  };
  const Gate gates[] = {
      {{"kv_f16", "linear.dense", "{}", llmk::DType::f16}, 0.999, 1e-5},                       // [1.000 / 8.5e-7]
      // Weights rounded to BF16; many-row GEMMs also round activations to BF16
      // (oneDNN on BF16 rows, or the BF16 dot-product panel kernel).
      {{"dense bf16", "linear.dense", R"({"weight_dtype":"bf16","bf16_layout":"rows"})", llmk::DType::f32},
       0.99, 1.5e-4},                                                                          // [0.994-0.995 / 5.2e-5]
      {{"dense bf16 dot", "linear.dense", R"({"weight_dtype":"bf16","bf16_activations":true})", llmk::DType::f32},
       0.99, 1.5e-4},                                                                          // [0.994-0.995 / 5.2e-5]
      {{"kv_i8 group 8", "linear.dense", "{}", llmk::DType::i8, 8}, 0.99, 7e-4},             // [0.991 / 4.8e-4]
      {{"kv_i8 group 4", "linear.dense", "{}", llmk::DType::i8, 4}, 0.99, 6e-4},             // [0.992 / 2.6e-4]
      {{"kv_i8 g8 unrotated", "linear.dense", "{}", llmk::DType::i8, 8, false}, 0.98, 2e-3},  // [0.986 / 8.8e-4]
      {{"kv_i8 g4 unrotated", "linear.dense", "{}", llmk::DType::i8, 4, false}, 0.99, 6e-4},  // [0.995 / 2.5e-4]
      {{"w8a8 (o_proj float)", "linear.int8", "{}", llmk::DType::f32}, 0.975, 2e-3},           // [0.981 / 1.06e-3]
      {{"int4 group<=128", "linear.int4", "{}", llmk::DType::f32}, 0.85, 0.13},  // [0.863 / 9.1e-2]
      {{"int4 group<=128 min_max", "linear.int4", R"({"range":"min_max"})", llmk::DType::f32}, 0.83, 0.14},  // [0.845 / 9.8e-2]
      // Rows exact in f32 instead of int8 per group.
      {{"int4 f32 activations", "linear.int4", R"({"activations":"f32"})", llmk::DType::f32}, 0.85, 0.13},  // [0.859 / 9.0e-2]
      {{"int4 lm_head float", "linear.int4", R"({"float_layers":["lm_head"]})", llmk::DType::f32}, 0.87, 0.1},  // [0.871 / 6.9e-2]
      {{"int4 g16 lm_head float", "linear.int4", R"({"group_size":16,"float_layers":["lm_head"]})", llmk::DType::f32},
       0.90, 0.06},                                                                            // [0.916 / 3.9e-2]
      // Lookup-table 4-bit (linear.lut4), int8 rows per 32 inputs: IQ4_NL's
      // levels in blocks of 32 with searched f16 scales (4.5 bits per weight)
      // beat int4's one group per row; NF4 in bitsandbytes' blocks of 64 with
      // absmax scales (4.5 bits) stays within 0.03 of it: its levels are
      // the quantiles of a normal distribution, and absmax spends the end
      // levels on each block's largest weight.
      {{"lut4 iq4_nl block 32", "linear.lut4", "{}", llmk::DType::f32}, 0.88, 0.08},              // [0.897 / 5.6e-2]
      {{"lut4 nf4 block 64", "linear.lut4", R"({"codebook":"nf4"})", llmk::DType::f32}, 0.82, 0.13},  // [0.839 / 1.08e-1]
      {{"uint8_zp per channel", "linear.uint8_zp", "{}", llmk::DType::f32}, 0.99, 6e-4},     // [0.994 / 3.0e-4]
      {{"uint8_zp per tensor", "linear.uint8_zp", R"({"per_channel":false})", llmk::DType::f32}, 0.95, 8e-3},  // [0.973 / 4.4e-3]
      {{"w8a8 + kv_i8 group 8", "linear.int8", "{}", llmk::DType::i8, 8}, 0.975, 3e-3},      // [0.980 / 1.4e-3]
  };
  for (const Gate& gate : gates) {
    std::unique_ptr<Runner> runner;
    try {
      runner = std::make_unique<Runner>(gate.mode);
    } catch (const std::exception& e) {
      // A mode this CPU cannot run must say so by name; the other gates still apply.
      const std::string why = e.what();
      INFO(gate.mode.name << ": " << why);
      REQUIRE(why.find("which this CPU lacks") != std::string::npos);
      std::printf("quant accuracy: %s not run on this CPU: %s\n", gate.mode.name, why.c_str());
      continue;
    }
    Runner& run = *runner;
    Metrics prefill, decode;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const auto* ids = i == text_index ? &text : nullptr;
      prefill.add(ref_prefill[i], run.logits(seqs[i], false), run.vocab(), ids);
      decode.add(ref_decode[i], run.logits(seqs[i], true), run.vocab(), ids);
    }
    std::printf("%-24s %9.4f %9.4f %11.2e %11.2e %9.3f %12zu %10zu\n", gate.mode.name, prefill.top1(), decode.top1(),
                prefill.mean_kl(), decode.mean_kl(), prefill.perplexity(), run.weight_bytes(), run.kv_cache_bytes());
    CAPTURE(gate.mode.name);
    CHECK(prefill.top1() >= gate.min_top1);
    CHECK(decode.top1() >= gate.min_top1);
    CHECK(prefill.mean_kl() <= gate.max_kl);
    CHECK(decode.mean_kl() <= gate.max_kl);
    // Perplexity of the text may rise but stays near the float model's.
    REQUIRE(prefill.perplexity() <= self.perplexity() * 1.5);
  }
}
