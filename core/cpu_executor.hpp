// The CPU executor: the Llama forward of core/model.hpp (weights and KV
// memory in host memory, OpenMP threads as the device's queue) behind the
// Executor interface. Logits land in two host buffers the executor keeps
// and alternates between steps: a view is valid until the execute() after
// next, so the sampler may read step t's logits while step t+1 runs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/executor.hpp"
#include "core/model.hpp"
#include "core/sampler.hpp"

namespace llmk {

class CpuExecutor final : public Executor {
 public:
  // Resolves the runtime (KV capacity_fraction applies to physical memory)
  // and builds the model. The checkpoint must outlive the executor. In a
  // parallel job, this rank's share of the model, with rank 0's runtime
  // (every rank must agree on slots and step sizes): a collective call.
  CpuExecutor(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint, PluginRegistry& plugins,
              std::shared_ptr<ParallelJob> job = nullptr);

  Device device() const override { return Device::cpu; }
  const ModelConfig& model_config() const override { return model_->config(); }
  const ModelRuntime& runtime() const override { return model_->runtime(); }
  using Executor::execute;
  LogitsView execute(const StepBatch& batch, const SampledIds& previous) override;
  size_t weight_bytes() const override { return model_->weight_bytes(); }
  size_t kv_cache_bytes() const override { return model_->kv_cache_bytes(); }
  std::string describe() const override;
  bool attends_token_trees() const override { return model_->attends_token_trees(); }
  int32_t views_kept() const override { return 2; }
  bool argmax_rows(const LogitsView& view, std::span<int32_t> out) override;
  void embed_rows(const StepBatch& batch, float* hidden) override { model_->forward_hidden(batch, hidden); }
  bool copy_hidden_rows(int32_t num_rows, float* hidden) override { return model_->copy_last_hidden(num_rows, hidden); }
  bool keeps_hidden_rows() const override { return model_->shard().stages == 1 && model_->shard().tensor.degree == 1; }
  const ModelShard& shard() const { return model_->shard(); }
  bool time_forwards(ForwardTimings* timings) override {
    model_->time_forwards(timings);
    return true;
  }

  bool set_stage_handover(std::function<void(const float* rows, size_t count)> handover) override {
    if (model_->shard().last_stage()) return false;
    model_->set_stage_handover(std::move(handover));
    return true;
  }

  std::vector<uint8_t> save_kv(const std::vector<int32_t>& slots) override { return model_->save_kv(slots); }
  void restore_kv(const std::vector<int32_t>& slots, const std::vector<uint8_t>& data) override {
    model_->restore_kv(slots, data);
  }

 private:
  std::unique_ptr<Model> model_;
  // Two [rows, vocab_size] buffers, used in turn; each grown to the largest
  // step it served, never shrunk; shared with the views handed out
  // (LogitsView::keep_alive).
  std::shared_ptr<std::vector<float>> logits_[2] = {std::make_shared<std::vector<float>>(),
                                                    std::make_shared<std::vector<float>>()};
  int next_logits_ = 0;  // the buffer the next step writes
  std::vector<ArgmaxPart> argmax_parts_;  // argmax_rows' scratch, [rows * threads]
  StepBatch resolved_;  // a step with fed-back rows, their ids put in
};

// The CPU's entries in the device registry (core/device_registry.hpp).
std::unique_ptr<Executor> make_cpu_executor(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint,
                                            PluginRegistry& plugins);
std::unique_ptr<Executor> make_cpu_shard_executor(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint,
                                                  PluginRegistry& plugins, std::shared_ptr<ParallelJob> job);

}  // namespace llmk
