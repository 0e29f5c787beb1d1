// Model weights: memory-mapped safetensors (single file or sharded) from a
// Hugging Face directory, or deterministic random "dummy" weights.
//
// Every tensor is validated against the ModelConfig before anything uses it:
// header length and JSON, dtype, shape, offsets inside the file and not
// overlapping, nothing missing, nothing unexpected. Failures throw
// Error(bad_checkpoint) naming the file, the tensor and what is wrong.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/model_config.hpp"

namespace llmk {

struct TensorView {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // valid while the owning Checkpoint lives
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
};

class Checkpoint {
 public:
  virtual ~Checkpoint() = default;
  const ModelConfig& config() const { return config_; }
  // Throws Error(bad_checkpoint) when absent.
  const TensorView& tensor(const std::string& name) const;
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  // Bytes of all tensors in their stored dtype.
  size_t total_bytes() const;
  // Where the tokenizer.model lives for this checkpoint (may be empty).
  const std::filesystem::path& tokenizer_path() const { return tokenizer_path_; }

 protected:
  ModelConfig config_;
  std::map<std::string, TensorView> tensors_;
  std::filesystem::path tokenizer_path_;
};

// The tensor names (Hugging Face layout) and shapes a config requires.
std::map<std::string, std::vector<int64_t>> expected_tensors(const ModelConfig& config);

// Loads a Hugging Face Llama directory (config.json + model.safetensors or
// model.safetensors.index.json + shards, tokenizer.model).
std::unique_ptr<Checkpoint> load_checkpoint(const std::filesystem::path& model_dir);

// Deterministic random weights in config.dtype for benchmarking at real
// sizes; tokenizer_path is recorded as given.
std::unique_ptr<Checkpoint> make_dummy_checkpoint(const ModelConfig& config, uint64_t seed,
                                                  const std::filesystem::path& tokenizer_path);

}  // namespace llmk
