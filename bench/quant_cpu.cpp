// Decode speed and memory of the quantized modes on dummy weights.
//
//   bench_quant_cpu [--preset llama-110m] [--model PATH] [--modes dense,int8,int4,uint8_zp,lut4,...]
//                   [--threads 2] [--steps 32] [--batch 1,32] [--prompt 16] [--prefill 0]
//                   [--kv-mib 1024] [--dtype f32|f16|bf16] [--kv-i8 1] [--clock wall|cpu]
//
// lut4 is linear.lut4 with its defaults (IQ4_NL, blocks of 32), lut4_nf4 the
// same with {"codebook":"nf4"} (blocks of 64), lut4_f32 and int4_f32 with
// {"activations":"f32"}, int4_g32 linear.int4 with {"group_size":32} (int8
// rows rounded per 32 inputs, as lut4's). --model takes a real
// checkpoint (a GGUF file or a model directory) instead of the preset's dummy
// weights. --prefill N also times one N-token prompt at batch 1 (the median
// of three, after one untimed).
//
// For each linear mode: weight memory (as the plugins store it), decode
// tokens/s at each batch size (one new token per sequence per step, logits
// for every sequence; prompts prefilled first), and the same at the largest
// batch with an int8 KV cache (--kv-i8 0 skips that second build). Then, at equal KV memory (--kv-mib), how many
// sequences of the model's full context an f32 and an int8 KV cache hold.
// --clock cpu divides by the process's CPU time instead of wall time: on a
// shared machine with one thread, that approximates the speed of an idle core
// (with more threads it also counts time spent waiting at barriers).
#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <stdlib.h>  // getloadavg
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/hw_probe.hpp"
#include "core/model.hpp"
#include "core/plugin_loader.hpp"
#include "core/step.hpp"

namespace {

struct Options {
  std::string preset = "llama-110m";
  std::string model;  // a checkpoint instead of the preset's dummy weights
  int prefill = 0;
  std::vector<std::string> modes{"dense", "int8", "int4"};
  std::vector<int> batches{1, 32};
  int threads = 2;
  int steps = 32;
  int prompt = 16;
  uint64_t kv_mib = 1024;
  std::string dtype;  // "" = the preset's
  bool kv_i8 = true;
  bool cpu_clock = false;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--preset") o.preset = v;
    else if (k == "--model") o.model = v;
    else if (k == "--prefill") o.prefill = std::stoi(v);
    else if (k == "--modes") o.modes = split(v);
    else if (k == "--batch") {
      o.batches.clear();
      for (const auto& b : split(v)) o.batches.push_back(std::stoi(b));
    } else if (k == "--threads") o.threads = std::stoi(v);
    else if (k == "--steps") o.steps = std::stoi(v);
    else if (k == "--prompt") o.prompt = std::stoi(v);
    else if (k == "--kv-mib") o.kv_mib = std::stoull(v);
    else if (k == "--dtype") o.dtype = v;
    else if (k == "--kv-i8") o.kv_i8 = v != "0";
    else if (k == "--clock") o.cpu_clock = v == "cpu";
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return o;
}

struct Linear {
  const char* plugin;
  const char* options;
};

Linear plugin_of(const std::string& mode) {
  if (mode == "dense") return {"linear.dense", "{}"};
  if (mode == "int8") return {"linear.int8", "{}"};
  if (mode == "int4") return {"linear.int4", "{}"};
  if (mode == "uint8_zp") return {"linear.uint8_zp", "{}"};
  if (mode == "lut4") return {"linear.lut4", "{}"};
  if (mode == "lut4_nf4") return {"linear.lut4", R"({"codebook":"nf4"})"};
  if (mode == "lut4_f32") return {"linear.lut4", R"({"activations":"f32"})"};
  if (mode == "int4_f32") return {"linear.int4", R"({"activations":"f32"})"};
  if (mode == "int4_g32") return {"linear.int4", R"({"group_size":32})"};
  std::fprintf(stderr, "unknown mode %s (dense, int8, int4, int4_f32, int4_g32, uint8_zp, lut4, lut4_nf4, lut4_f32)\n",
               mode.c_str());
  std::exit(2);
}

struct Result {
  size_t weight_bytes = 0;
  std::vector<double> tok_per_s;  // per batch size
  double tok_per_s_kv_i8 = 0.0;   // at the largest batch
  double prefill_tok_per_s = 0.0;  // one --prefill prompt at batch 1
};

bool g_cpu_clock = false;

double now_seconds() {
  timespec ts{};
  clock_gettime(g_cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Prefills `batch` sequences of `prompt` tokens, then times `steps` decode steps.
double decode_tok_per_s(llmk::Model& model, int batch, int prompt, int steps, uint32_t slots_per_seq) {
  const int32_t vocab = model.config().vocab_size;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(3, vocab - 1);
  std::vector<float> logits(static_cast<size_t>(batch) * vocab);
  auto step = [&](int first, int count) {
    llmk::StepBatch b;
    b.max_blocks_per_seq = 1;
    b.block_size = static_cast<int32_t>(slots_per_seq);
    b.query_start.push_back(0);
    for (int s = 0; s < batch; ++s) {
      for (int p = first; p < first + count; ++p) {
        b.token_ids.push_back(tok(rng));
        b.positions.push_back(p);
        b.slot_mapping.push_back(static_cast<int32_t>(s * slots_per_seq + p));
      }
      b.query_start.push_back(b.num_tokens());
      b.context_lens.push_back(first + count);
      b.block_tables.push_back(static_cast<int32_t>(s * slots_per_seq));
      b.logits_rows.push_back(b.num_tokens() - 1);
    }
    model.forward(b, logits.data());
  };
  step(0, prompt);
  step(prompt, 1);  // warm-up decode
  const double t0 = now_seconds();
  for (int i = 0; i < steps; ++i) step(prompt + 1 + i, 1);
  const double s = now_seconds() - t0;
  return static_cast<double>(batch) * steps / s;
}

// One prompt of n tokens at batch 1, timed three times after one untimed run: the median.
double prefill_tok_per_s(llmk::Model& model, int n) {
  const int32_t vocab = model.config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(vocab));
  llmk::StepBatch b;
  b.max_blocks_per_seq = 1;
  b.block_size = n;
  b.query_start = {0, n};
  b.context_lens = {n};
  b.block_tables = {0};
  b.logits_rows = {n - 1};
  for (int p = 0; p < n; ++p) {
    b.token_ids.push_back(3 + p % (vocab - 3));
    b.positions.push_back(p);
    b.slot_mapping.push_back(p);
  }
  model.forward(b, logits.data());
  double t[3];
  for (double& v : t) {
    const double t0 = now_seconds();
    model.forward(b, logits.data());
    v = now_seconds() - t0;
  }
  std::sort(t, t + 3);
  return n / t[1];
}

std::unique_ptr<llmk::Model> make_model(const std::shared_ptr<const llmk::Checkpoint>& ckpt,
                                        llmk::PluginRegistry& registry, const Linear& linear, llmk::DType kv,
                                        int threads, uint32_t slots, uint32_t max_step_tokens) {
  llmk::EngineConfig cfg;
  cfg.plugins.linear = linear.plugin;
  cfg.plugins.linear_options = linear.options;
  cfg.kv_cache.dtype = kv;
  cfg.kv_cache.capacity_tokens = slots;
  cfg.scheduler.max_num_batched_tokens = max_step_tokens;
  cfg.executor.num_threads = threads;
  return std::make_unique<llmk::Model>(ckpt, registry, cfg, llmk::resolve_runtime(cfg, *ckpt));
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  g_cpu_clock = o.cpu_clock;
  auto preset = llmk::model_preset(o.preset);
  if (!preset) {
    std::fprintf(stderr, "unknown preset %s\n", o.preset.c_str());
    return 2;
  }
  llmk::ModelConfig mc = *preset;
  if (!o.dtype.empty() && !llmk::parse_dtype(o.dtype, mc.dtype)) {
    std::fprintf(stderr, "unknown dtype %s\n", o.dtype.c_str());
    return 2;
  }
  llmk::ModelSection section;
  section.path = o.model;
  const auto ckpt = o.model.empty() ? std::shared_ptr<const llmk::Checkpoint>(llmk::make_dummy_checkpoint(mc, 1, ""))
                                    : llmk::open_model(section);
  if (!o.model.empty()) mc = ckpt->config();
  llmk::PluginRegistry registry;
  const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  const uint32_t slots_per_seq = static_cast<uint32_t>(o.prompt + o.steps + 2);
  const uint32_t slots = std::max<uint32_t>(slots_per_seq * static_cast<uint32_t>(max_batch), o.prefill);
  const uint32_t max_step = static_cast<uint32_t>(std::max(max_batch * o.prompt, o.prefill));

  std::printf("%s %s (%s weights, %d layers, hidden %d, intermediate %d, vocab %d), %d threads, %d decode steps, %s clock\n",
              o.model.empty() ? "preset" : "model", o.model.empty() ? o.preset.c_str() : o.model.c_str(),
              llmk::dtype_name(mc.dtype), mc.num_layers, mc.hidden_size, mc.intermediate_size,
              mc.vocab_size, o.threads, o.steps, o.cpu_clock ? "process CPU" : "wall");
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  std::printf("load average at start: %.2f %.2f %.2f (machine shared: figures vary with it)\n", load[0], load[1], load[2]);
  std::vector<Result> results;
  for (const auto& mode : o.modes) {
    Result r;
    {
      auto model = make_model(ckpt, registry, plugin_of(mode), llmk::DType::f32, o.threads, slots, max_step);
      r.weight_bytes = model->weight_bytes();
      for (int b : o.batches) r.tok_per_s.push_back(decode_tok_per_s(*model, b, o.prompt, o.steps, slots_per_seq));
      if (o.prefill > 0) r.prefill_tok_per_s = prefill_tok_per_s(*model, o.prefill);
    }
    if (o.kv_i8) {
      auto model = make_model(ckpt, registry, plugin_of(mode), llmk::DType::i8, o.threads, slots, max_step);
      r.tok_per_s_kv_i8 = decode_tok_per_s(*model, max_batch, o.prompt, o.steps, slots_per_seq);
    }
    results.push_back(r);
  }

  std::printf("\n%-9s %12s", "mode", "weights_MiB");
  for (int b : o.batches) std::printf("  tok/s@%-3d (x dense)", b);
  if (o.kv_i8) std::printf("  tok/s@%d kv_i8", max_batch);
  if (o.prefill > 0) std::printf("  prefill%d tok/s (x dense)", o.prefill);
  std::printf("\n");
  for (size_t m = 0; m < o.modes.size(); ++m) {
    std::printf("%-9s %12.1f", o.modes[m].c_str(), results[m].weight_bytes / 1048576.0);
    for (size_t b = 0; b < o.batches.size(); ++b)
      std::printf("  %9.1f (%5.2fx)", results[m].tok_per_s[b], results[m].tok_per_s[b] / results[0].tok_per_s[b]);
    if (o.kv_i8) std::printf("  %14.1f", results[m].tok_per_s_kv_i8);
    if (o.prefill > 0)
      std::printf("  %14.1f (%5.2fx)", results[m].prefill_tok_per_s,
                  results[m].prefill_tok_per_s / results[0].prefill_tok_per_s);
    std::printf("\n");
  }

  getloadavg(load, 3);
  std::printf("load average at end: %.2f %.2f %.2f\n", load[0], load[1], load[2]);

  // Concurrent full-context sequences at equal KV memory.
  llmk::EngineConfig cfg;
  cfg.kv_cache.capacity_bytes = o.kv_mib << 20;
  cfg.kv_cache.dtype = llmk::DType::f32;
  const auto memory = static_cast<uint64_t>(llmk::physical_memory_bytes());
  const auto f32 = llmk::resolve_runtime(cfg, mc, "dummy", memory);
  cfg.kv_cache.dtype = llmk::DType::i8;
  const auto i8 = llmk::resolve_runtime(cfg, mc, "dummy", memory);
  const uint32_t ctx = f32.max_seq_len;
  std::printf("\nKV cache of %llu MiB, context %u: f32 holds %u tokens = %u sequences; i8 (group %u) holds %u tokens = "
              "%u sequences (%.2fx)\n",
              static_cast<unsigned long long>(o.kv_mib), ctx, f32.num_kv_slots, f32.num_kv_slots / ctx,
              i8.kv_group_size, i8.num_kv_slots, i8.num_kv_slots / ctx,
              static_cast<double>(i8.num_kv_slots) / f32.num_kv_slots);
  return 0;
}
