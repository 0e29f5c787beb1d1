// Model weights: memory-mapped safetensors (single file or sharded) from a
// Hugging Face directory, or deterministic random "dummy" weights.
//
// Every tensor is validated against the ModelConfig before anything uses it:
// header length and JSON, dtype, shape, offsets inside the file and not
// overlapping, nothing missing, nothing unexpected. Failures throw
// Error(bad_checkpoint) naming the file, the tensor and what is wrong.
//
// Tensors keep their stored dtype (F32, F16 or BF16; a GGUF file's quantized
// tensors as ggml blocks, core/dtype.hpp); a checkpoint may mix them (e.g.
// F32 norms next to BF16 projections, Q4_K beside Q6_K), so consumers read
// TensorView::dtype rather than config().dtype. Data pointers are aligned to
// at least their element size (a misaligned tensor in a file is copied).
// Ignored tensors: model.layers.N.self_attn.rotary_emb.inv_freq (recomputed
// from rope_theta), and lm_head.weight when tie_word_embeddings is true
// (its shape is still checked; the embedding is the output matrix, as in
// transformers).
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
  size_t nbytes() const { return dtype_bytes(dtype, numel()); }
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
  void set_tokenizer_path(std::filesystem::path p) { tokenizer_path_ = std::move(p); }
  // Where the weights came from: the model directory, or "dummy:<preset> seed=<n>".
  const std::string& source() const { return source_; }
  // The weights' file format as resolve_load_format names it: "safetensors",
  // "gguf" or "dummy" (kv_cache.dtype: auto reads it).
  const std::string& format() const { return format_; }

 protected:
  ModelConfig config_;
  std::map<std::string, TensorView> tensors_;
  std::filesystem::path tokenizer_path_;
  std::string source_;
  std::string format_ = "safetensors";
};

// The tensor names (Hugging Face layout) and shapes a config requires
// (q/k/v biases, [out], when config.attention_bias).
std::map<std::string, std::vector<int64_t>> expected_tensors(const ModelConfig& config);

// Loads a Hugging Face Llama directory (config.json + model.safetensors or
// model.safetensors.index.json + shards, tokenizer.model). The files are
// mapped, not read: loading costs page faults on first use only.
std::unique_ptr<Checkpoint> load_checkpoint(const std::filesystem::path& model_dir);

// Deterministic random weights in config.dtype for benchmarking at real
// sizes; tokenizer_path is recorded as given. Element i of tensor t is a
// function of (seed, t's name, i) only, so the bytes do not depend on the
// thread count. Projections are uniform with std 1/sqrt(fan_in), embeddings
// uniform with std 0.02, q/k/v biases std 0.1, norms 1: activations stay
// O(1) through the layers.
std::unique_ptr<Checkpoint> make_dummy_checkpoint(const ModelConfig& config, uint64_t seed,
                                                  const std::filesystem::path& tokenizer_path);

struct ModelSection;

// "safetensors", "gguf" or "dummy": what section.load_format resolves to.
// "auto" means gguf when the path is a file starting with the GGUF magic
// (core/gguf_checkpoint.hpp), safetensors for any other path, else dummy
// when a preset is given.
// Throws Error(invalid_config) when neither is.
std::string resolve_load_format(const ModelSection& section);
// The model's config without loading weights (preset or config.json).
ModelConfig resolve_model_config(const ModelSection& section);
// The one entry point every command uses: loads safetensors from
// section.path or builds dummy weights for section.preset (seed
// section.seed), and sets the tokenizer path: section.tokenizer when given
// (must exist), else the directory's tokenizer (find_tokenizer), else for
// dummy weights default_tokenizer_path().
std::shared_ptr<const Checkpoint> open_model(const ModelSection& section);
// The tokenizer for dummy weights: models/llama2-tokenizer/tokenizer.model
// under $LLMK_SHARED_DIR, then ../shared (relative to the current
// directory), then the shared folder beside the source tree. Throws
// Error(not_found) listing the places tried.
std::filesystem::path default_tokenizer_path();
// The tokenizer file of a Hugging Face model directory: tokenizer.model
// (sentencepiece) when present, else tokenizer.json; empty when neither is.
// tokenizer.model wins when both exist (Llama 2 and Mistral repositories ship
// both): sentencepiece is those models' own tokenizer, and the Hugging Face
// conversion differs from it in corner cases.
std::filesystem::path find_tokenizer(const std::filesystem::path& model_dir);

}  // namespace llmk
