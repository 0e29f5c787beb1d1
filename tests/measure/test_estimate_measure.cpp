// `llmk estimate --measure`: the roofline arithmetic applied to this
// machine's measured bandwidth and GEMM rate. Whether the prediction matches
// a timed decode run is a benchmark (`llmk estimate --measure --verify`,
// recorded in docs/PERFORMANCE.md), not a test: wall-clock comparisons fail
// on a loaded machine.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

#include "render_check.hpp"

using namespace llmk::test;

TEST_CASE("estimate --measure applies the roofline to the figures it measured", "[estimate]") {
  const std::string cmd = std::string(LLMK_BINARY_DIR) +
                          "/bin/llmk estimate --preset llama-110m --measure --verify false --threads 1 --batch 1 "
                          "--prompt-len 128 --output-len 64 --json 2>/dev/null";
  const std::string out = run_capture(cmd);
  INFO(out);
  const nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  CHECK(j["device"]["source"] == "measured");
  CHECK_FALSE(j.contains("measured_decode_step_time_s"));  // --verify false times nothing
  const double bandwidth = j["device"]["bandwidth_bytes_s"];
  const double peak = j["device"]["peak_flops_32"];
  REQUIRE(bandwidth > 0);
  REQUIRE(peak > 0);

  // llama-110m written out by hand: hidden 768, 12 layers, 12 heads (no
  // GQA), head_dim 64, FFN 2048, vocab 32000, tied embeddings, F32 weights
  // and (as the CPU engine stores it) F32 K/V.
  const double h = 768, layers = 12, heads = 12, head_dim = 64, ffn = 2048, vocab = 32000;
  const double params = layers * (4 * h * h + 3 * h * ffn + 2 * h) + vocab * h + h;
  const double weight_bytes = 4 * params;
  const double kv_bytes_per_token = 2 * layers * heads * head_dim * 4;
  const double context = 128 + 64 / 2.0;
  // Two FLOPs per parameter (the tied table counts once, as the lm_head;
  // the estimate also counts the norm weights), plus QK^T and PV over the
  // context.
  const double flops = 2 * params + 4 * layers * heads * head_dim * context;
  const double bytes = weight_bytes + context * kv_bytes_per_token;
  const double expected = std::max(bytes / bandwidth, flops / peak);

  CHECK(j["weight_bytes"].get<double>() == Approx(weight_bytes));
  CHECK(j["kv_bytes_per_token"].get<double>() == Approx(kv_bytes_per_token));
  CHECK(j["decode_step_time_s"].get<double>() == Approx(expected).epsilon(1e-9));
  CHECK(j["decode_memory_bound"].get<bool>() == (bytes / bandwidth >= flops / peak));
  CHECK(j["decode_tokens_per_s"].get<double>() == Approx(1.0 / expected).epsilon(1e-9));
}
