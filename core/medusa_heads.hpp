// Medusa heads (Cai et al. 2024, Medusa-1): extra decoding heads on a frozen
// base model. Each reads the base model's last hidden state after its final
// RMSNorm (what lm_head reads) at the newest verified position t; head i
// predicts the token at t + 2 + i (the base model's own lm_head gives t + 1).
//
// Head i is medusa_num_layers residual blocks, x <- x + SiLU(W x + b) with W
// [hidden, hidden] and a bias, then a linear map to the vocabulary without
// bias. Checkpoints come as the reference implementation saves them: a
// safetensors file (medusa_lm_head.safetensors) whose tensors are named
// "{i}.{j}.linear.weight" and "{i}.{j}.linear.bias" for block j of head i,
// and "{i}.{medusa_num_layers}.weight" for its output map [vocab, hidden];
// beside it an optional config.json with medusa_num_heads and
// medusa_num_layers. F32, F16 and BF16 tensors are read; the heads are held
// as F32 on the host.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace llmk {

class MedusaHeads {
 public:
  // Zero weights: every block the identity, every output map 0.
  MedusaHeads(int32_t num_heads, int32_t num_layers, int32_t hidden_size, int32_t vocab_size);

  // Opens `path`: the safetensors file, or a directory holding
  // medusa_lm_head.safetensors (and maybe config.json). The heads must
  // match the target: hidden_size and vocab_size. Throws
  // Error(invalid_config) naming `key`, the file and what is wrong: a
  // missing file, a tensor name that is not a head's, a missing tensor, a
  // shape off the target's, a config.json disagreeing with the tensors.
  static MedusaHeads load(const std::filesystem::path& path, int32_t hidden_size, int32_t vocab_size,
                          const std::string& key = "speculative.medusa_heads");

  int32_t num_heads() const { return static_cast<int32_t>(heads_.size()); }
  int32_t num_layers() const { return num_layers_; }
  int32_t hidden_size() const { return hidden_; }
  int32_t vocab_size() const { return vocab_; }

  // Head `head`'s logits for `rows` hidden states: x [rows, hidden_size]
  // in, logits [rows, vocab_size] out. scratch is resized as needed.
  void forward(int32_t head, const float* x, int32_t rows, float* logits, std::vector<float>& scratch) const;

  // Weights, row-major as the file holds them (tests and loading fill them).
  std::vector<float>& block_weight(int32_t head, int32_t layer);  // [hidden, hidden]
  std::vector<float>& block_bias(int32_t head, int32_t layer);    // [hidden]
  std::vector<float>& out_weight(int32_t head);                   // [vocab, hidden]
  size_t bytes() const;

 private:
  struct Head {
    std::vector<std::vector<float>> weight, bias;
    std::vector<float> out;
  };
  int32_t num_layers_ = 0, hidden_ = 0, vocab_ = 0;
  std::vector<Head> heads_;
};

}  // namespace llmk
