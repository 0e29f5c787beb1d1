// A saved evaluation run: what `llmk eval --save-logits` writes and
// `--kl-base` reads back, so another configuration of the same model can be
// compared with it token by token (KL divergence, top-1 agreement).
//
// Layout (little-endian):
//   "LLMKLOGP"                        8 bytes
//   u32 version (1), u32 header bytes
//   header                            JSON: model, text, chunking, token count
//   i32 tokens[num_chunks * ctx]      the text's ids, as tokenized (before BOS)
//   rows, chunk by chunk, position by position over [ctx/2, ctx - 1):
//     i32 argmax                      the row's top id (first of ties)
//     f32 nll                         -log p(next token)
//     f16 log_probs[vocab_size]       every id's log-probability
// f16 keeps 11 significant bits: a log-probability x is stored within
// |x| * 2^-11. A saved row is renormalized before a KL divergence is
// computed from it, so the rounding enters weighted by how much the two
// distributions differ (a run against its own saved logits gives 0 up to
// second-order terms).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "apps/eval/perplexity.hpp"

namespace llmk {
struct ModelConfig;
}

namespace llmk::eval {

// What a saved run scored. Two runs compare when the model's shape, the
// chunking and every token agree; the model and text paths are for messages
// (an F32 file and its quantized twin are different files of one model).
struct RunIdentity {
  std::string model;  // path as given
  std::string architecture;
  int32_t vocab_size = 0, num_layers = 0, hidden_size = 0, num_heads = 0, num_kv_heads = 0;
  std::string text;    // path as given
  std::string config;  // the executor's description (plugins), for messages
  ChunkPlan plan;
  std::vector<int32_t> tokens;  // [plan.num_tokens()]
};

RunIdentity make_identity(const std::string& model_path, const ModelConfig& model, const std::string& text_path,
                          const std::string& config, const ChunkPlan& plan, std::span<const int32_t> tokens);

// Throws Error(invalid_argument) naming the base file and the first thing
// that differs (model shape, chunking, the first differing token).
void check_same_run(const RunIdentity& base, const RunIdentity& current, const std::string& base_path);

class LogitsWriter {
 public:
  // Creates `path` and writes the header. Throws Error(invalid_argument) when it cannot.
  LogitsWriter(const std::filesystem::path& path, const RunIdentity& identity);
  // The next scored row; log_probs has vocab_size entries.
  void write_row(int32_t argmax, double nll, std::span<const double> log_probs);
  // Flushes and checks that every row of the plan was written.
  void finish();

 private:
  std::filesystem::path path_;
  std::ofstream out_;
  int32_t vocab_size_ = 0;
  int64_t rows_expected_ = 0, rows_written_ = 0;
  std::vector<uint16_t> buffer_;
};

class LogitsReader {
 public:
  // Opens `path` and reads the header. Throws Error(invalid_argument) naming
  // the file when it is not such a file, another version, or truncated.
  explicit LogitsReader(const std::filesystem::path& path);
  const RunIdentity& identity() const { return identity_; }

  struct Row {
    int32_t argmax = 0;
    float nll = 0;
    std::vector<float> log_probs;  // [vocab_size]
  };
  // The next row in file order.
  void read_row(Row& row);

 private:
  std::filesystem::path path_;
  std::ifstream in_;
  RunIdentity identity_;
  std::vector<uint16_t> buffer_;
};

}  // namespace llmk::eval
