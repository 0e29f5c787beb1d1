#include <catch2/catch.hpp>

#include <cmath>

#include "core/error.hpp"
#include "core/estimate.hpp"
#include "core/parallel.hpp"

using namespace llmk;

namespace {

// The worked example: d_model 8192, 64 layers, full multi-head attention, a
// gated MLP of 8/3 d (so 12 d^2 weights per layer), fp16.
ModelConfig worked_model() {
  ModelConfig m;
  m.hidden_size = 8192;
  m.num_layers = 64;
  m.num_heads = 64;
  m.num_kv_heads = 64;
  m.head_dim = 128;
  m.intermediate_size = 21845;  // 8/3 x 8192, rounded down
  m.vocab_size = 32000;
  m.tie_word_embeddings = true;
  return m;
}

DeviceSpec a100_at_1_5_tb() {
  DeviceSpec d;
  d.name = "a100-notes";
  d.memory_bytes = 80e9;
  d.bandwidth_bytes_s = 1.5e12;
  d.peak_flops_16 = 312e12;
  return d;
}

}  // namespace

TEST_CASE("fp16 KV of a d_model 8192, 64-layer model is 2 x 2 x 64 x 8192 bytes per token", "[estimate]") {
  EstimateInput in;
  in.model = worked_model();
  in.device = a100_at_1_5_tb();
  const EstimateResult r = estimate(in);
  CHECK(r.kv_bytes_per_token == 2.0 * 2 * 64 * 8192);
  CHECK(r.kv_bytes_per_token == Approx(2.1e6).epsilon(0.01));
}

TEST_CASE("reading 12 x 2 x 64 x 8192^2 bytes of weights at 1.5 TB/s bounds a decode step at about 69 ms",
          "[estimate]") {
  EstimateInput in;
  in.model = worked_model();
  in.device = a100_at_1_5_tb();
  in.batch_size = 1;
  in.prompt_len = 1;
  in.output_len = 2;
  const EstimateResult r = estimate(in);
  const double notes_bytes = 12.0 * 2 * 64 * 8192.0 * 8192.0;
  CHECK(r.weight_bytes == Approx(notes_bytes).epsilon(0.01));
  CHECK(r.decode_memory_bound);
  CHECK(r.decode_step_time_s == Approx(0.069).epsilon(0.01));
}

TEST_CASE("an A100's 312 TFLOP/s over 1.5 TB/s puts the ridge at about 208 FLOPs per byte", "[estimate]") {
  EstimateInput in;
  in.model = worked_model();
  in.device = a100_at_1_5_tb();
  CHECK(estimate(in).ridge_flops_per_byte == Approx(208.0));
}

TEST_CASE("decode turns compute-bound once the batch passes the ridge point", "[estimate]") {
  EstimateInput in;
  in.model = worked_model();
  in.device = a100_at_1_5_tb();
  in.prompt_len = 1;
  in.output_len = 2;
  in.kv_bytes_per_element = 2;
  in.batch_size = 8;
  CHECK(estimate(in).decode_memory_bound);
  in.batch_size = 512;
  CHECK_FALSE(estimate(in).decode_memory_bound);
}

TEST_CASE("tensor parallelism splits weights and adds all-reduce time", "[estimate]") {
  EstimateInput in;
  in.model = *model_preset("llama3-8b");
  in.device = *find_device("H100-SXM");
  const EstimateResult one = estimate(in);
  in.tensor_parallel = 4;
  const EstimateResult four = estimate(in);
  // Each device: a quarter of everything but its two norms per layer and the final norm, whole on every rank.
  const ModelConfig& m = in.model;
  const double norms = (2.0 * m.num_layers + 1) * m.hidden_size;
  CHECK(four.weight_bytes_per_device == Approx(((one.num_params - norms) / 4 + norms) * 2));
  CHECK(four.tp_comm_time_per_step_s > 0);
  CHECK(one.tp_comm_time_per_step_s == 0);
  CHECK(four.kv_capacity_tokens > 4 * one.kv_capacity_tokens);
}

TEST_CASE("a tensor degree the engine refuses is refused with the engine's message", "[estimate]") {
  EstimateInput in;
  in.model = worked_model();  // MLP width 21845: odd
  in.device = a100_at_1_5_tb();
  in.tensor_parallel = 4;
  std::string engine_message;
  try {
    tensor_shard(in.model, 4, 0);
  } catch (const Error& e) {
    engine_message = e.what();
  }
  REQUIRE_THAT(engine_message, Catch::Contains("MLP width 21845"));
  CHECK_THROWS_WITH(estimate(in), engine_message);
  in.tensor_parallel = 1;
  in.pipeline_parallel = 65;  // more stages than the 64 layers
  CHECK_THROWS_WITH(estimate(in), Catch::Contains("parallel.pipeline 65 exceeds the model's 64 layers"));
}

TEST_CASE("the devices of tensor 2 x pipeline 2 hold the whole model once, plus the norms each tensor rank repeats",
          "[estimate][parallel]") {
  EstimateInput in;
  in.model = *model_preset("llama3-8b");  // 32 layers, hidden 4096, 8 KV heads, untied 128256-token vocabulary
  in.device = *find_device("h100-sxm");
  in.tensor_parallel = 2;
  in.pipeline_parallel = 2;
  const EstimateResult r = estimate(in);
  REQUIRE(r.devices.size() == 4);
  const ModelConfig& m = in.model;
  double params = 0, kv = 0;
  for (const auto& d : r.devices) {
    params += d.num_params;
    kv += d.kv_bytes_per_token;
    CHECK(d.stage == d.rank / 2);
    CHECK(d.tensor_rank == d.rank % 2);
    // The lm_head (128256 x 4096) weighs 2.4 layers (218M weights each):
    // the stages' even share is 17.2 layers, so stage 0 takes 17.
    CHECK(d.first_layer == 17 * d.stage);
    CHECK(d.last_layer == (d.stage == 0 ? 17 : 32));
  }
  // The embedding sits on the first stage, lm_head on the last, each cut in
  // vocabulary rows; a stage's two tensor ranks each keep its layers' norms
  // (and the last stage the final norm) whole.
  const double repeated_norms = 2.0 * m.num_layers * m.hidden_size + m.hidden_size;
  CHECK(params == llama_num_params(m) + repeated_norms);
  CHECK(kv == r.kv_bytes_per_token);  // the 8 KV heads split, nothing repeated
  // Rank 0: 17 layers at half width with their norms whole, half the
  // embedding; rank 2: 15 layers, half the lm_head and the final norm. bf16.
  const double h = 4096, layer_half = (h * 4096 + 2 * h * 1024 + 4096 * h) / 2 + 3 * h * 14336 / 2;
  CHECK(r.devices[0].num_params == 17 * (layer_half + 2 * h) + 64128 * h);
  CHECK(r.devices[2].num_params == 15 * (layer_half + 2 * h) + 64128 * h + h);
  CHECK(r.weight_bytes_per_device == Approx(2 * (17 * (layer_half + 2 * h) + 64128 * h)));  // the largest: rank 0
  CHECK(r.kv_bytes_per_token_per_device == 2.0 * 17 * 4 * 128 * 2);
}

TEST_CASE("past the KV heads' count, each device holds one KV head and the job's KV bytes grow",
          "[estimate][parallel]") {
  EstimateInput in;
  in.model = *model_preset("llama3-8b");  // 8 KV heads
  in.device = *find_device("h100-sxm");
  in.tensor_parallel = 16;
  const EstimateResult r = estimate(in);
  REQUIRE(r.devices.size() == 16);
  double kv = 0;
  for (const auto& d : r.devices) {
    CHECK(d.kv_bytes_per_token == 2.0 * 32 * 1 * 128 * 2);
    kv += d.kv_bytes_per_token;
  }
  CHECK(kv == 2 * r.kv_bytes_per_token);  // each of the 8 heads on 2 ranks
}

TEST_CASE("a tied embedding is held by the first stage and again by the last, as its lm_head",
          "[estimate][parallel]") {
  ModelConfig m;
  m.hidden_size = 64;
  m.num_layers = 5;
  m.num_heads = 8;
  m.num_kv_heads = 4;
  m.head_dim = 8;
  m.intermediate_size = 172;
  m.vocab_size = 512;
  m.tie_word_embeddings = true;
  EstimateInput in;
  in.model = m;
  in.device = *find_device("a10g");
  in.weight_bytes_per_param = 4;
  in.pipeline_parallel = 2;
  const EstimateResult r = estimate(in);
  REQUIRE(r.devices.size() == 2);
  CHECK(r.devices[0].num_params + r.devices[1].num_params == llama_num_params(m) + 512 * 64);
  CHECK(r.devices[0].last_layer == 3);  // the earlier stage takes the odd layer
  CHECK(r.devices[1].first_layer == 3);
}

TEST_CASE("communication per decode step: all-reduces and the logits gather at tensor 8, sends at pipeline 4",
          "[estimate][parallel]") {
  EstimateInput in;
  in.model = *model_preset("llama3-8b");
  in.device = *find_device("h100-sxm");  // NVLink 900 GB/s
  in.activation_bytes = 2;
  in.tensor_parallel = 8;
  EstimateResult r = estimate(in);
  // (2 x 32 + 1) all-reduces of 4096 bf16 values, 2 x 7/8 of each sent per
  // device: 65 x 1.75 x 8192 = 931840 bytes; the logits gather sends 7
  // slices of 128256 / 8 = 16032 f32: 448896 bytes.
  CHECK(r.tp_comm_bytes_per_step == 931840.0 + 448896.0);
  CHECK(r.tp_comm_time_per_step_s == Approx(1380736.0 / 450e9));  // NVLink 4: 450 GB/s each way
  CHECK(r.pp_comm_bytes_per_step == 0);
  in.tensor_parallel = 1;
  in.pipeline_parallel = 4;
  r = estimate(in);
  // 3 boundaries x 4096 bf16 values, then 128256 f32 logits to rank 0.
  CHECK(r.pp_comm_bytes_per_step == 3 * 8192.0 + 513024.0);
  CHECK(r.tp_comm_bytes_per_step == 0);
  // One step passes the four stages in turn: the weights are read in the
  // same time as on one device.
  in.pipeline_parallel = 1;
  const EstimateResult one = estimate(in);
  CHECK(r.decode_step_time_s == Approx(one.decode_step_time_s + r.pp_comm_time_per_step_s).epsilon(1e-3));
}

TEST_CASE("KV capacity counts what is left after the weights and the logits buffers", "[estimate]") {
  EstimateInput in;
  in.model = worked_model();
  in.device = a100_at_1_5_tb();
  in.device.memory_bytes = 200e9;  // the 103 GB of weights fit, with room for KV
  in.memory_utilization = 1.0;
  in.prompt_len = 1000;
  in.output_len = 1000;
  in.batch_size = 64;
  const EstimateResult r = estimate(in);
  // Two f32 logits buffers of batch x vocab.
  CHECK(r.logits_bytes == Approx(2.0 * in.batch_size * in.model.vocab_size * 4));
  const double expected_tokens = (200e9 - r.weight_bytes - r.logits_bytes) / r.kv_bytes_per_token;
  CHECK(r.kv_capacity_tokens == Approx(expected_tokens));
  CHECK(r.max_concurrent_seqs == std::floor(expected_tokens / 2000));
}

TEST_CASE("every built-in device is found by name and has positive limits", "[estimate]") {
  for (const char* name : {"a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "l40s", "rtx-4090", "a10g"}) {
    auto d = find_device(name);
    REQUIRE(d);
    CHECK(d->bandwidth_bytes_s > 0);
    CHECK(d->peak_flops_16 > 0);
    CHECK(d->memory_bytes > 0);
  }
  CHECK_FALSE(find_device("tpu-v9"));
}
