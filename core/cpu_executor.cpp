#include "core/cpu_executor.hpp"

namespace llmk {

CpuExecutor::CpuExecutor(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint,
                         PluginRegistry& plugins) {
  const ModelRuntime runtime = resolve_runtime(cfg, checkpoint->config());
  model_ = std::make_unique<Model>(std::move(checkpoint), plugins, cfg, runtime);
}

LogitsView CpuExecutor::execute(const StepBatch& batch, const SampledIds& previous) {
  const int32_t vocab = model_->config().vocab_size;
  const size_t needed = static_cast<size_t>(batch.num_logits()) * static_cast<size_t>(vocab);
  // A larger step gets a new buffer: a view of the old one may still be held.
  if (logits_->size() < needed) logits_ = std::make_shared<std::vector<float>>(needed);
  if (batch.fed_back.empty()) {
    model_->forward(batch, logits_->data());
  } else {
    // The previous step's ids are host memory here: put them into a copy of
    // the batch (reused: decode steps of similar sizes allocate nothing),
    // which the forward validates.
    validate_fed_back(batch, previous, Device::cpu);
    resolved_ = batch;
    resolved_.fed_back.clear();
    for (const FedBackToken& f : batch.fed_back)
      resolved_.token_ids.at(static_cast<size_t>(f.row)) = previous.failed ? 0 : previous.data[f.previous_row];
    model_->forward(resolved_, logits_->data());
  }
  LogitsView view;
  view.device = Device::cpu;
  view.data = logits_->data();
  view.keep_alive = logits_;
  view.num_rows = batch.num_logits();
  view.vocab_size = vocab;
  view.row_stride = vocab;
  return view;  // written before forward() returned: ready.event stays null
}

std::string CpuExecutor::describe() const {
  return "cpu, " + std::to_string(model_->runtime().num_threads) + " threads";
}

}  // namespace llmk
