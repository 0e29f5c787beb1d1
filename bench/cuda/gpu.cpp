// GPU figures of the CUDA executor on dummy weights, each beside a limit
// measured in the same run (run by scripts/gpu-check.sh; needs a GPU):
//   limits:  device-to-device copy bandwidth (bytes read + written), and a
//            cuBLAS BF16 GEMM's TFLOP/s (8192^3, F32 accumulation);
//   per preset and linear plugin:
//     decode, batch 1: tok/s, and weight bytes per token / step time as a
//       fraction of the measured bandwidth;
//     decode at 64 and 256 sequences: aggregate tok/s;
//     prefill of 2048 tokens: TFLOP/s (2 x parameters x tokens) as a
//       fraction of the measured GEMM peak;
//   per preset, the KV cache's capacity in 2048-token sequences in the same
//     share of device memory (85% of what the weights leave free) for a BF16
//     cache and for int8 caches (groups of 8, the default, and of 32).
// Prints a markdown table for docs/PERFORMANCE.md. Steps are timed on the
// host around execute() and the logits event (what the engine waits for),
// best of --repeats after a warm-up.
//
//   bench_gpu [--presets llama2-7b,llama3-8b] [--linear linear.cublas,...]
//             [--kv-dtype bf16] [--repeats 5] [--decode-steps 32]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "actors/built_executors.hpp"
#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/cuda/cuda_executor.hpp"
#include "core/error.hpp"
#include "core/plugin_loader.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "bench_gpu: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// Bytes moved per second by a 1 GiB device-to-device copy (read + write).
double copy_bandwidth_gbs(int repeats) {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, bytes), "cudaMalloc");
  check(cudaMalloc(&b, bytes), "cudaMalloc");
  check(cudaMemset(a, 1, bytes), "cudaMemset");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  float best = 1e30f;
  for (int i = 0; i <= repeats; ++i) {
    cudaEventRecord(start);
    check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice), "copy");
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (i > 0) best = std::min(best, ms);
  }
  cudaFree(a);
  cudaFree(b);
  return 2.0 * static_cast<double>(bytes) / (best * 1e-3) / 1e9;
}

// TFLOP/s of a BF16 GEMM (m = n = k = 8192, F32 accumulation) on random data.
double bf16_gemm_tflops(int repeats) {
  const int n = 8192;
  const size_t elems = static_cast<size_t>(n) * n;
  std::vector<uint16_t> host(elems);
  uint32_t x = 12345;
  for (auto& h : host) {
    x = x * 1664525u + 1013904223u;
    h = static_cast<uint16_t>(0x3c00 | ((x >> 16) & 0x03ff));  // bf16 values in [0.0078, 0.0156)
  }
  void *a = nullptr, *b = nullptr, *c = nullptr;
  check(cudaMalloc(&a, elems * 2), "cudaMalloc");
  check(cudaMalloc(&b, elems * 2), "cudaMalloc");
  check(cudaMalloc(&c, elems * 4), "cudaMalloc");
  check(cudaMemcpy(a, host.data(), elems * 2, cudaMemcpyHostToDevice), "upload");
  check(cudaMemcpy(b, host.data(), elems * 2, cudaMemcpyHostToDevice), "upload");
  cublasHandle_t handle;
  cublasCreate(&handle);
  const float alpha = 1.0f, beta = 0.0f;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  float best = 1e30f;
  for (int i = 0; i <= repeats; ++i) {
    cudaEventRecord(start);
    cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n, &beta, c,
                 CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (i > 0) best = std::min(best, ms);
  }
  cublasDestroy(handle);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 2.0 * n * static_cast<double>(n) * n / (best * 1e-3) / 1e12;
}

// Seconds of one step: execute() plus the wait for its logits.
double time_step(llmk::Executor& executor, const llmk::StepBatch& b) {
  const auto t0 = clock_type::now();
  const llmk::LogitsView view = executor.execute(b);
  if (view.ready.event != nullptr) check(cudaEventSynchronize(static_cast<cudaEvent_t>(view.ready.event)), "step");
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// The prompts (`prompt` tokens each) of sequences [first, first + count);
// sequence s keeps its cache in slots s * span onward.
llmk::StepBatch prefill_step(int32_t first, int32_t count, int32_t prompt, int32_t span) {
  llmk::StepBatch b;
  b.block_size = span;
  b.max_blocks_per_seq = 1;
  b.query_start = {0};
  for (int32_t s = first; s < first + count; ++s) {
    for (int32_t p = 0; p < prompt; ++p) {
      b.token_ids.push_back(1 + (s * 31 + p * 7) % 1000);
      b.positions.push_back(p);
      b.slot_mapping.push_back(s * span + p);
    }
    b.query_start.push_back(b.num_tokens());
    b.context_lens.push_back(prompt);
    b.block_tables.push_back(s * span);
    b.logits_rows.push_back(b.num_tokens() - 1);
  }
  return b;
}

llmk::StepBatch decode_step(int32_t num_seqs, int32_t position, int32_t span) {
  llmk::StepBatch b;
  b.block_size = span;
  b.max_blocks_per_seq = 1;
  b.query_start = {0};
  for (int32_t s = 0; s < num_seqs; ++s) {
    b.token_ids.push_back(1 + s % 1000);
    b.positions.push_back(position);
    b.slot_mapping.push_back(s * span + position);
    b.query_start.push_back(s + 1);
    b.context_lens.push_back(position + 1);
    b.block_tables.push_back(s * span);
    b.logits_rows.push_back(s);
  }
  return b;
}

// KV slots the CUDA executor gives the preset in 85% of the memory its
// weights leave free, for one cache dtype and group size.
uint32_t kv_capacity_slots(const std::string& preset, llmk::DType dtype, uint32_t group_size) {
  llmk::EngineConfig cfg;
  cfg.model.load_format = "dummy";
  cfg.model.preset = preset;
  cfg.executor.device = "cuda";
  cfg.executor.cuda_graphs = false;
  cfg.plugins.linear = "linear.cublas";
  cfg.plugins.linear_options = R"({"dtype":"bf16"})";
  cfg.plugins.attention = "attention.cuda";
  cfg.kv_cache.dtype = dtype;
  cfg.kv_cache.group_size = group_size;
  cfg.kv_cache.capacity_fraction = 0.85;
  cfg.kv_cache.max_seq_len = 2048;
  cfg.scheduler.max_num_seqs = 1u << 20;  // no cap from the sequence count
  auto checkpoint = llmk::open_model(cfg.model);
  llmk::PluginRegistry plugins;
  return llmk::make_executor(cfg, checkpoint, plugins)->runtime().num_kv_slots;
}

struct Row {
  std::string preset, linear;
  double setup_s = 0;  // dummy weights made (a preset's first row), packed and uploaded
  double decode1 = 0, decode1_bw = 0, decode64 = 0, decode256 = 0, prefill_tflops = 0, prefill_fraction = 0;
  std::string error;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> presets{"llama2-7b", "llama3-8b"}, linears{"linear.cublas"};
  std::string kv_dtype = "bf16";
  int repeats = 5, decode_steps = 32;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--presets") presets = split(v);
    else if (a == "--linear") linears = split(v);
    else if (a == "--kv-dtype") kv_dtype = v;
    else if (a == "--repeats") repeats = std::max(1, std::atoi(v.c_str()));
    else if (a == "--decode-steps") decode_steps = std::max(1, std::atoi(v.c_str()));
    else {
      std::fprintf(stderr, "bench_gpu: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "bench_gpu: no CUDA device is visible\n");
    return 1;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const double bandwidth = copy_bandwidth_gbs(repeats);
  const double peak = bf16_gemm_tflops(repeats);
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::printf("limits: device copy %.0f GB/s (read + write); cuBLAS BF16 GEMM 8192^3 %.0f TFLOP/s\n", bandwidth, peak);

  llmk::register_built_executors();
  std::vector<Row> rows;
  const int32_t prompt = 128, span = prompt + decode_steps + 8;
  for (const std::string& preset : presets) {
    // One set of dummy weights per preset, shared by every plugin's executor.
    std::shared_ptr<const llmk::Checkpoint> checkpoint;
    for (const std::string& linear : linears) {
      const auto row_start = clock_type::now();
      Row row;
      row.preset = preset;
      row.linear = linear;
      try {
        llmk::EngineConfig cfg;
        cfg.model.load_format = "dummy";
        cfg.model.preset = preset;
        cfg.executor.device = "cuda";
        cfg.plugins.linear = linear;
        if (linear == "linear.cublas") cfg.plugins.linear_options = R"({"dtype":"bf16"})";
        cfg.plugins.attention = "attention.cuda";
        llmk::DType kv = llmk::DType::bf16;
        if (!llmk::parse_dtype(kv_dtype, kv))
          throw llmk::Error(llmk::ErrorCode::invalid_argument, "--kv-dtype: unknown dtype " + kv_dtype);
        cfg.kv_cache.dtype = kv;
        cfg.kv_cache.capacity_tokens = static_cast<uint64_t>(256) * span;
        cfg.kv_cache.max_seq_len = static_cast<uint32_t>(std::max(2048, span));
        cfg.scheduler.max_num_batched_tokens = 2048;
        cfg.scheduler.max_num_seqs = 256;
        if (!checkpoint) checkpoint = llmk::open_model(cfg.model);
        llmk::PluginRegistry plugins;
        auto executor = llmk::make_executor(cfg, checkpoint, plugins);
        row.setup_s = std::chrono::duration<double>(clock_type::now() - row_start).count();
        const double params = static_cast<double>(checkpoint->config().num_parameters());
        const double weight_bytes = static_cast<double>(executor->weight_bytes());

        // Decode at batch 1, 64 and 256: prefill each batch (in steps of at
        // most max_num_batched_tokens, as the scheduler would), then time decode steps.
        const int32_t seqs_per_step =
            std::max<int32_t>(1, static_cast<int32_t>(cfg.scheduler.max_num_batched_tokens) / prompt);
        for (const int32_t batch : {1, 64, 256}) {
          for (int32_t first = 0; first < batch; first += seqs_per_step)
            time_step(*executor, prefill_step(first, std::min(seqs_per_step, batch - first), prompt, span));
          double best = 1e30;
          for (int r = 0; r < repeats; ++r) {
            double total = 0;
            for (int32_t step = 0; step < decode_steps; ++step)
              total += time_step(*executor, decode_step(batch, prompt + step, span));
            best = std::min(best, total / decode_steps);
          }
          const double tok_s = batch / best;
          if (batch == 1) {
            row.decode1 = tok_s;
            row.decode1_bw = weight_bytes / best / 1e9 / bandwidth;
          } else if (batch == 64) {
            row.decode64 = tok_s;
          } else {
            row.decode256 = tok_s;
          }
        }
        // One prompt of 2048 tokens.
        const llmk::StepBatch long_prompt = prefill_step(0, 1, 2048, 2048);
        time_step(*executor, long_prompt);
        double best = 1e30;
        for (int r = 0; r < repeats; ++r) best = std::min(best, time_step(*executor, long_prompt));
        row.prefill_tflops = 2.0 * params * 2048 / best / 1e12;
        row.prefill_fraction = row.prefill_tflops / peak;
      } catch (const std::exception& e) {
        row.error = e.what();
      }
      // Each row as it is measured, so a run cut short keeps what it measured.
      if (row.error.empty())
        std::fprintf(stderr,
                     "bench_gpu: %s %s: decode b=1 %.1f tok/s (%.0f%% of bandwidth), b=64 %.0f, b=256 %.0f tok/s; "
                     "prefill 2048 %.1f TFLOP/s (%.0f%% of peak); setup %.0f s, all %.0f s\n",
                     preset.c_str(), linear.c_str(), row.decode1, 100 * row.decode1_bw, row.decode64, row.decode256,
                     row.prefill_tflops, 100 * row.prefill_fraction, row.setup_s,
                     std::chrono::duration<double>(clock_type::now() - row_start).count());
      else
        std::fprintf(stderr, "bench_gpu: %s %s: error: %s\n", preset.c_str(), linear.c_str(), row.error.c_str());
      rows.push_back(row);
    }
  }

  std::printf("\n| preset | linear | decode b=1 tok/s | of bandwidth | vs linear.cublas | decode b=64 tok/s | "
              "decode b=256 tok/s | prefill 2048 TFLOP/s | of GEMM peak |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    if (!r.error.empty()) {
      std::printf("| %s | %s | error: %s |\n", r.preset.c_str(), r.linear.c_str(), r.error.c_str());
      continue;
    }
    // The quantized plugins' batch-1 speed-up over the BF16 one of the same preset.
    double base = 0;
    for (const Row& o : rows)
      if (o.preset == r.preset && o.linear == "linear.cublas" && o.error.empty()) base = o.decode1;
    const std::string speedup = base > 0 ? std::to_string(r.decode1 / base).substr(0, 4) + "x" : "n/a";
    std::printf("| %s | %s | %.1f | %.0f%% | %s | %.0f | %.0f | %.1f | %.0f%% |\n", r.preset.c_str(), r.linear.c_str(),
                r.decode1, 100 * r.decode1_bw, speedup.c_str(), r.decode64, r.decode256, r.prefill_tflops,
                100 * r.prefill_fraction);
  }

  std::printf("\n| preset | KV bf16: 2048-token sequences | KV i8 group 8 | vs bf16 | KV i8 group 32 | vs bf16 |\n"
              "|---|---|---|---|---|---|\n");
  for (const std::string& preset : presets) {
    try {
      const double bf16 = kv_capacity_slots(preset, llmk::DType::bf16, 8) / 2048.0;
      const double i8_8 = kv_capacity_slots(preset, llmk::DType::i8, 8) / 2048.0;
      const double i8_32 = kv_capacity_slots(preset, llmk::DType::i8, 32) / 2048.0;
      std::printf("| %s | %.0f | %.0f | %.2fx | %.0f | %.2fx |\n", preset.c_str(), bf16, i8_8, i8_8 / bf16, i8_32,
                  i8_32 / bf16);
    } catch (const std::exception& e) {
      std::printf("| %s | error: %s |\n", preset.c_str(), e.what());
    }
  }
  return 0;
}
