// llmk estimate: roofline bounds for a model on a device (built-in table or
// this machine, measured), optionally checked against a measured decode run.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <thread>

#include "actors/built_executors.hpp"
#include "apps/command.hpp"
#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/estimate.hpp"
#include "core/hw_probe.hpp"
#include "core/model_runtime.hpp"
#include "core/executor.hpp"
#include "core/plugin_loader.hpp"

namespace llmk::app {
namespace {

struct EstimateOptions {
  std::string model_dir;
  std::string preset;
  std::string device = "a100-80gb";
  bool measure = false;
  bool verify = true;
  std::string weight_dtype = "auto";
  std::string kv_dtype = "auto";  // the engine's kv_cache.dtype: auto rule (resolve_kv_dtype)
  int batch = 1;
  int prompt_len = 512;
  int output_len = 128;
  int tp = 1;
  int pp = 1;
  int threads = 0;
  bool json = false;
  bool list_devices = false;
};

double bytes_per(const std::string& dtype, const ModelConfig& m) {
  if (dtype == "auto") return dtype_bytes_per_value(m.dtype);  // 0.5625 for a Q4_K GGUF
  if (dtype == "f32") return 4;
  if (dtype == "f16" || dtype == "bf16") return 2;
  if (dtype == "fp8" || dtype == "int8" || dtype == "i8") return 1;
  if (dtype == "int4") return 0.5;
  throw Error(ErrorCode::invalid_argument,
              "unknown dtype '" + dtype + "' (allowed: auto, f32, f16, bf16, fp8, int8, int4)");
}

// Times real decode steps of one sequence on this machine's CPU executor,
// with dummy weights: prefill `context` tokens, then `steps` single-token
// decodes, each timed. The roofline is a bound on the step time, like the
// best-of-N bandwidth and GEMM probes it comes from, so the step it is
// compared with is the fastest one; the median shows how steady they were.
struct DecodeTiming {
  double best_s = 0;
  double median_s = 0;
};

DecodeTiming measure_decode_step(const ModelConfig& model, int context, int steps, int threads) {
  auto checkpoint = std::shared_ptr<const Checkpoint>(make_dummy_checkpoint(model, 1, {}));
  EngineConfig cfg;
  cfg.executor.num_threads = threads;
  cfg.kv_cache.capacity_tokens = static_cast<uint32_t>(context + steps + 1);
  cfg.kv_cache.max_seq_len = static_cast<uint32_t>(context + steps + 1);
  cfg.scheduler.max_num_batched_tokens = static_cast<uint32_t>(std::max(context, 1));
  PluginRegistry plugins(cfg.plugins.search_path.empty()
                             ? std::vector<std::filesystem::path>{}
                             : std::vector<std::filesystem::path>(cfg.plugins.search_path.begin(),
                                                                  cfg.plugins.search_path.end()));
  register_built_executors();
  const auto runner = make_executor(cfg, checkpoint, plugins);

  // One sequence in one contiguous range starting at slot 0.
  auto make_step = [&](int first_pos, int num_new) {
    StepBatch b;
    for (int i = 0; i < num_new; ++i) {
      b.token_ids.push_back((first_pos + i) % model.vocab_size);
      b.positions.push_back(first_pos + i);
      b.slot_mapping.push_back(first_pos + i);
    }
    b.query_start = {0, num_new};
    b.context_lens = {first_pos + num_new};
    b.block_tables = {0};
    b.max_blocks_per_seq = 1;
    b.block_size = context + steps + 1;
    b.logits_rows = {num_new - 1};
    return b;
  };
  runner->execute(make_step(0, context));
  runner->execute(make_step(context, 1));  // warm-up decode
  std::vector<double> times;
  for (int s = 1; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    runner->execute(make_step(context + s, 1));
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return {times.front(), times[times.size() / 2]};
}

nlohmann::json devices_json(const EstimateResult& r) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& d : r.devices)
    out.push_back({{"rank", d.rank},
                   {"stage", d.stage},
                   {"tensor_rank", d.tensor_rank},
                   {"layers", {d.first_layer, d.last_layer}},
                   {"num_params", d.num_params},
                   {"weight_bytes", d.weight_bytes},
                   {"kv_bytes_per_token", d.kv_bytes_per_token},
                   {"kv_capacity_tokens", d.kv_capacity_tokens}});
  return out;
}

nlohmann::json to_json(const EstimateInput& in, const EstimateResult& r) {
  return {{"device", {{"name", in.device.name},
                      {"source", in.device.source},
                      {"memory_bytes", in.device.memory_bytes},
                      {"bandwidth_bytes_s", in.device.bandwidth_bytes_s},
                      {"peak_flops_16", in.device.peak_flops_16},
                      {"peak_flops_32", in.device.peak_flops_32}}},
          {"inputs", {{"batch_size", in.batch_size},
                      {"prompt_len", in.prompt_len},
                      {"output_len", in.output_len},
                      {"tensor_parallel", in.tensor_parallel},
                      {"pipeline_parallel", in.pipeline_parallel},
                      {"activation_bytes", in.activation_bytes},
                      {"weight_bytes_per_param", in.weight_bytes_per_param},
                      {"kv_bytes_per_element", in.kv_bytes_per_element}}},
          {"num_params", r.num_params},
          {"weight_bytes", r.weight_bytes},
          {"weight_bytes_per_device", r.weight_bytes_per_device},
          {"kv_bytes_per_token", r.kv_bytes_per_token},
          {"kv_bytes_per_token_per_device", r.kv_bytes_per_token_per_device},
          {"devices", devices_json(r)},
          {"logits_bytes", r.logits_bytes},
          {"kv_capacity_tokens", r.kv_capacity_tokens},
          {"max_concurrent_seqs", r.max_concurrent_seqs},
          {"ridge_flops_per_byte", r.ridge_flops_per_byte},
          {"prefill_time_s", r.prefill_time_s},
          {"decode_step_time_s", r.decode_step_time_s},
          {"decode_memory_bound", r.decode_memory_bound},
          {"decode_tokens_per_s", r.decode_tokens_per_s},
          {"tp_comm_bytes_per_step", r.tp_comm_bytes_per_step},
          {"tp_comm_time_per_step_s", r.tp_comm_time_per_step_s},
          {"pp_comm_bytes_per_step", r.pp_comm_bytes_per_step},
          {"pp_comm_time_per_step_s", r.pp_comm_time_per_step_s},
          {"request_latency_s", r.request_latency_s}};
}

void print_table(const EstimateInput& in, const EstimateResult& r) {
  std::printf("device            %s (%s): %.1f GB, %.1f GB/s, %.1f TFLOP/s 16-bit, %.2f TFLOP/s fp32\n",
              in.device.name.c_str(), in.device.source.c_str(), in.device.memory_bytes / 1e9,
              in.device.bandwidth_bytes_s / 1e9, in.device.peak_flops_16 / 1e12, in.device.peak_flops_32 / 1e12);
  std::printf("parameters        %.3f B\n", r.num_params / 1e9);
  std::printf("weights           %.3f GB (%.3f GB on the largest device, tp=%d pp=%d)\n", r.weight_bytes / 1e9,
              r.weight_bytes_per_device / 1e9, in.tensor_parallel, in.pipeline_parallel);
  std::printf("KV per token      %.1f KB (%.1f KB on the largest device)\n", r.kv_bytes_per_token / 1e3,
              r.kv_bytes_per_token_per_device / 1e3);
  if (r.devices.size() > 1)
    for (const auto& d : r.devices)
      std::printf("  rank %-3d        stage %d layers [%d, %d), tensor rank %d: %.3f GB weights, %.1f KB KV per token, "
                  "%.0f tokens\n",
                  d.rank, d.stage, d.first_layer, d.last_layer, d.tensor_rank, d.weight_bytes / 1e9,
                  d.kv_bytes_per_token / 1e3, d.kv_capacity_tokens);
  std::printf("logits buffers    %.1f MB (2 x batch %d x vocab %d, f32)\n", r.logits_bytes / 1e6, in.batch_size,
              in.model.vocab_size);
  std::printf("KV capacity       %.0f tokens, %.0f sequences of %d tokens\n", r.kv_capacity_tokens,
              r.max_concurrent_seqs, in.prompt_len + in.output_len);
  std::printf("ridge point       %.1f FLOPs/byte\n", r.ridge_flops_per_byte);
  std::printf("prefill bound     %.3f ms (batch %d x %d tokens)\n", r.prefill_time_s * 1e3, in.batch_size,
              in.prompt_len);
  std::printf("decode step bound %.3f ms (%s-bound), %.1f tokens/s at batch %d\n", r.decode_step_time_s * 1e3,
              r.decode_memory_bound ? "memory" : "compute", r.decode_tokens_per_s, in.batch_size);
  if (in.tensor_parallel > 1)
    std::printf("tp all-reduce     %.2f us per step (%.1f KB sent per device)\n", r.tp_comm_time_per_step_s * 1e6,
                r.tp_comm_bytes_per_step / 1e3);
  if (in.pipeline_parallel > 1)
    std::printf("pp sends          %.2f us per step (%.1f KB: hidden states between stages, logits to rank 0)\n",
                r.pp_comm_time_per_step_s * 1e6, r.pp_comm_bytes_per_step / 1e3);
  std::printf("request latency   %.3f s (prefill + %d decode steps)\n", r.request_latency_s, in.output_len);
}

const CommandRegistration registration{
    "estimate", "Roofline estimate of memory, prefill and decode time for a model on a device",
    [](CLI::App& cmd) {
      auto o = std::make_shared<EstimateOptions>();
      cmd.add_option("--model", o->model_dir, "Hugging Face model directory (its config.json)");
      cmd.add_option("--preset", o->preset, "model preset: llama-110m, tinyllama-1.1b, llama2-7b, llama3-8b, llama3.2-1b, qwen2.5-0.5b, mistral-7b");
      cmd.add_option("--device", o->device, "device from the built-in table (see --list-devices)")->capture_default_str();
      cmd.add_flag("--measure", o->measure, "use this machine's measured bandwidth and GEMM peak");
      cmd.add_option("--verify", o->verify, "with --measure: also time real decode steps and compare")->capture_default_str();
      cmd.add_option("--weight-dtype", o->weight_dtype, "auto, f32, f16, bf16, fp8, int8, int4")->capture_default_str();
      cmd.add_option("--kv-dtype", o->kv_dtype, "auto, f32, f16, bf16, fp8, int8 (auto: the engine's kv_cache.dtype auto, on the GPU or with --measure the CPU)")->capture_default_str();
      cmd.add_option("--batch", o->batch, "concurrent sequences")->capture_default_str()->check(CLI::PositiveNumber);
      cmd.add_option("--prompt-len", o->prompt_len, "prompt tokens")->capture_default_str()->check(CLI::PositiveNumber);
      cmd.add_option("--output-len", o->output_len, "output tokens")->capture_default_str()->check(CLI::Range(2, 1 << 20));
      cmd.add_option("--tp", o->tp, "tensor-parallel degree")->capture_default_str()->check(CLI::PositiveNumber);
      cmd.add_option("--pp", o->pp, "pipeline-parallel degree (stages)")->capture_default_str()->check(CLI::PositiveNumber);
      cmd.add_option("--threads", o->threads, "threads for --measure (0 = all cores)")->capture_default_str();
      cmd.add_flag("--json", o->json, "print JSON");
      cmd.add_flag("--list-devices", o->list_devices, "list the built-in devices");
      return [o]() -> int {
        if (o->list_devices) {
          for (const auto& d : builtin_devices()) {
            std::printf("%-10s %6.1f GB  %7.1f GB/s  %7.1f TFLOP/s 16-bit\n", d.name.c_str(), d.memory_bytes / 1e9,
                        d.bandwidth_bytes_s / 1e9, d.peak_flops_16 / 1e12);
          }
          return 0;
        }
        if (o->model_dir.empty() == o->preset.empty()) {
          throw Error(ErrorCode::invalid_argument, "estimate: give exactly one of --model or --preset");
        }
        EstimateInput in;
        if (!o->model_dir.empty()) {
          in.model = load_model_config(o->model_dir);
        } else {
          auto preset = model_preset(o->preset);
          if (!preset) throw Error(ErrorCode::invalid_argument, "estimate: unknown preset '" + o->preset + "'");
          in.model = *preset;
        }
        in.weight_bytes_per_param = bytes_per(o->weight_dtype, in.model);
        // auto: the type the engine's kv_cache.dtype auto picks for these
        // weights on the GPU, or with --measure on the CPU, where the measured
        // run keeps K/V (a prediction to compare with it counts the same bytes).
        std::string kv_dtype = o->kv_dtype;
        if (kv_dtype == "auto") {
          EngineConfig engine;
          engine.executor.device = o->measure ? "cpu" : "cuda";
          const KvDtypeChoice kv = resolve_kv_dtype(engine, in.model, o->model_dir.empty() ? "dummy" : "safetensors");
          kv_dtype = dtype_name(kv.dtype);
          spdlog::info("estimate: kv {} ({})", kv_dtype, kv.reason);
        }
        in.kv_bytes_per_element = bytes_per(kv_dtype, in.model);
        in.batch_size = o->batch;
        in.prompt_len = o->prompt_len;
        in.output_len = o->output_len;
        in.tensor_parallel = o->tp;
        in.pipeline_parallel = o->pp;
        if (o->measure) {
          spdlog::info("measuring memory bandwidth and GEMM peak of this machine");
          in.device.name = "this-machine";
          in.device.source = "measured";
          in.device.memory_bytes = physical_memory_bytes();
          in.device.bandwidth_bytes_s = measure_memory_bandwidth(size_t{512} << 20, 5, o->threads);
          in.device.peak_flops_32 = measure_gemm_flops(1024, 5, o->threads);
          in.device.peak_flops_16 = in.device.peak_flops_32;
          in.activation_bytes = 4;  // the CPU executor all-reduces and sends f32
          in.memory_utilization = 0.5;
        } else {
          auto device = find_device(o->device);
          if (!device) throw Error(ErrorCode::invalid_argument, "estimate: unknown device '" + o->device + "' (see --list-devices)");
          in.device = *device;
        }
        const EstimateResult r = estimate(in);
        nlohmann::json out = to_json(in, r);
        out["inputs"]["kv_dtype"] = kv_dtype;
        if (o->measure && o->verify) {
          if (o->batch != 1) throw Error(ErrorCode::invalid_argument, "estimate: --verify times batch 1; pass --batch 1 or --verify false");
          // The estimate uses the mean context of the generation; time decode there.
          const int context = o->prompt_len + o->output_len / 2;
          const int steps = 32;
          spdlog::info("timing {} decode steps at context {} on the CPU executor", steps, context);
          const DecodeTiming measured = measure_decode_step(in.model, context, steps, o->threads);
          const double predicted = r.decode_step_time_s;
          out["measured_decode_step_time_s"] = measured.best_s;
          out["measured_decode_step_median_s"] = measured.median_s;
          out["predicted_over_measured"] = predicted / measured.best_s;
          if (!o->json) {
            print_table(in, r);
            std::printf("measured decode   %.3f ms per step (best of %d; median %.3f ms); predicted/measured = %.2f\n",
                        measured.best_s * 1e3, steps - 1, measured.median_s * 1e3, predicted / measured.best_s);
          }
        } else if (!o->json) {
          print_table(in, r);
        }
        if (o->json) std::cout << out.dump(2) << "\n";
        return 0;
      };
    }};

}  // namespace
}  // namespace llmk::app
