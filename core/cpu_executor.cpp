#include "core/cpu_executor.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "core/openmp.hpp"

namespace llmk {

CpuExecutor::CpuExecutor(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint,
                         PluginRegistry& plugins, std::shared_ptr<ParallelJob> job) {
  ModelRuntime runtime = resolve_runtime(cfg, *checkpoint);
  if (job) {
    // Rank 0 plans the steps: every rank takes its slot count and limits.
    uint32_t limits[4] = {runtime.num_kv_slots, runtime.max_step_tokens, runtime.max_seq_len, runtime.num_threads};
    job->world().broadcast(limits, 4, DType::i32, 0);
    runtime.num_kv_slots = limits[0];
    runtime.max_step_tokens = limits[1];
    runtime.max_seq_len = limits[2];
  }
  model_ = std::make_unique<Model>(std::move(checkpoint), plugins, cfg, runtime, std::move(job));
  // Loading ran OpenMP regions on the building thread; forwards run on the
  // thread that calls execute() (the executor actor's), whose team must be
  // the only one spinning: the builder's workers go now.
  release_openmp_pool();
}

std::unique_ptr<Executor> make_cpu_executor(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint,
                                            PluginRegistry& plugins) {
  return std::make_unique<CpuExecutor>(cfg, std::move(checkpoint), plugins);
}

std::unique_ptr<Executor> make_cpu_shard_executor(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint,
                                                  PluginRegistry& plugins, std::shared_ptr<ParallelJob> job) {
  return std::make_unique<CpuExecutor>(cfg, std::move(checkpoint), plugins, std::move(job));
}

LogitsView CpuExecutor::execute(const StepBatch& batch, const SampledIds& previous) {
  const int32_t vocab = model_->config().vocab_size;
  const size_t needed = static_cast<size_t>(batch.num_logits()) * static_cast<size_t>(vocab);
  auto& buffer = logits_[next_logits_];
  // A larger step gets a new buffer: a view of the old one may still be held.
  if (buffer->size() < needed) buffer = std::make_shared<std::vector<float>>(needed);
  next_logits_ ^= 1;
  if (batch.fed_back.empty()) {
    model_->forward(batch, buffer->data());
  } else {
    // The previous step's ids are host memory here: put them into a copy of
    // the batch (reused: decode steps of similar sizes allocate nothing),
    // which the forward validates.
    validate_fed_back(batch, previous, Device::cpu);
    resolved_ = batch;
    resolved_.fed_back.clear();
    for (const FedBackToken& f : batch.fed_back)
      resolved_.token_ids.at(static_cast<size_t>(f.row)) = previous.failed ? 0 : previous.data[f.previous_row];
    model_->forward(resolved_, buffer->data());
  }
  LogitsView view;
  view.device = Device::cpu;
  view.data = buffer->data();
  view.keep_alive = buffer;
  view.num_rows = batch.num_logits();
  view.vocab_size = vocab;
  view.row_stride = vocab;
  return view;  // written before forward() returned: ready.event stays null
}

bool CpuExecutor::argmax_rows(const LogitsView& view, std::span<int32_t> out) {
  if (view.device != Device::cpu)
    throw Error(ErrorCode::invalid_argument,
                std::string("argmax_rows: a view of device '") + device_name(view.device) + "', not the CPU's");
  if (out.size() < static_cast<size_t>(view.num_rows))
    throw Error(ErrorCode::invalid_argument, "argmax_rows: " + std::to_string(out.size()) + " outputs for " +
                                                 std::to_string(view.num_rows) + " rows");
  // Each row cut into one part per thread: a batch-1 step's 32000 logits are
  // 128 KB, half of them written by the other thread's share of lm_head.
  const int32_t threads = std::max<int32_t>(1, model_->runtime().num_threads);
  const int32_t rows = view.num_rows;
  const int32_t vocab = view.vocab_size;
  const int32_t parts = rows * threads;
  argmax_parts_.resize(static_cast<size_t>(parts));
  ArgmaxPart* results = argmax_parts_.data();
#pragma omp parallel for schedule(static) num_threads(threads) if (static_cast<int64_t>(rows) * vocab >= 4096)
  for (int32_t p = 0; p < parts; ++p) {
    const int32_t row = p / threads;
    const int32_t part = p % threads;
    const int32_t begin = static_cast<int32_t>(static_cast<int64_t>(vocab) * part / threads);
    const int32_t end = static_cast<int32_t>(static_cast<int64_t>(vocab) * (part + 1) / threads);
    results[p] = argmax_part(view.row(row), begin, end);
  }
  for (int32_t row = 0; row < rows; ++row) {
    ArgmaxPart whole;
    for (int32_t part = 0; part < threads; ++part) whole = merge_argmax(whole, results[row * threads + part]);
    out[static_cast<size_t>(row)] = argmax_token(whole);
  }
  return true;
}

std::string CpuExecutor::describe() const {
  return "cpu, " + std::to_string(model_->runtime().num_threads) + " threads";
}

}  // namespace llmk
