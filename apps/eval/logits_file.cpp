#include "apps/eval/logits_file.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/model_config.hpp"

namespace llmk::eval {
namespace {

constexpr char kMagic[8] = {'L', 'L', 'M', 'K', 'L', 'O', 'G', 'P'};
constexpr uint32_t kVersion = 1;

[[noreturn]] void bad(const std::filesystem::path& path, const std::string& what) {
  throw Error(ErrorCode::invalid_argument, "logits file '" + path.string() + "': " + what);
}

nlohmann::json header_json(const RunIdentity& id) {
  return {{"model", id.model},
          {"architecture", id.architecture},
          {"vocab_size", id.vocab_size},
          {"num_layers", id.num_layers},
          {"hidden_size", id.hidden_size},
          {"num_heads", id.num_heads},
          {"num_kv_heads", id.num_kv_heads},
          {"text", id.text},
          {"config", id.config},
          {"ctx", id.plan.ctx},
          {"num_chunks", id.plan.num_chunks},
          {"first_scored", id.plan.first_scored},
          {"bos_id", id.plan.bos_id},
          {"num_tokens", id.tokens.size()}};
}

std::string shape_text(const RunIdentity& id) {
  return id.architecture + ", vocab " + std::to_string(id.vocab_size) + ", " + std::to_string(id.num_layers) +
         " layers, hidden " + std::to_string(id.hidden_size) + ", " + std::to_string(id.num_heads) + "/" +
         std::to_string(id.num_kv_heads) + " heads";
}

std::string chunking_text(const ChunkPlan& p) {
  return "ctx " + std::to_string(p.ctx) + ", " + std::to_string(p.num_chunks) + " chunks, scored from " +
         std::to_string(p.first_scored) + ", BOS " + (p.bos_id >= 0 ? std::to_string(p.bos_id) : "none");
}

size_t row_bytes(int32_t vocab_size) { return 8 + 2 * static_cast<size_t>(vocab_size); }

}  // namespace

RunIdentity make_identity(const std::string& model_path, const ModelConfig& model, const std::string& text_path,
                          const std::string& config, const ChunkPlan& plan, std::span<const int32_t> tokens) {
  RunIdentity id;
  id.model = model_path;
  id.architecture = model.architecture;
  id.vocab_size = model.vocab_size;
  id.num_layers = model.num_layers;
  id.hidden_size = model.hidden_size;
  id.num_heads = model.num_heads;
  id.num_kv_heads = model.num_kv_heads;
  id.text = text_path;
  id.config = config;
  id.plan = plan;
  id.tokens.assign(tokens.begin(), tokens.begin() + plan.num_tokens());
  return id;
}

void check_same_run(const RunIdentity& base, const RunIdentity& cur, const std::string& base_path) {
  const std::string where = "--kl-base '" + base_path + "' ";
  if (shape_text(base) != shape_text(cur))
    throw Error(ErrorCode::invalid_argument, where + "was saved from another model: " + base.model + " (" +
                                                 shape_text(base) + "), this run is " + cur.model + " (" +
                                                 shape_text(cur) + ")");
  const ChunkPlan& a = base.plan;
  const ChunkPlan& b = cur.plan;
  if (a.ctx != b.ctx || a.num_chunks != b.num_chunks || a.first_scored != b.first_scored || a.bos_id != b.bos_id)
    throw Error(ErrorCode::invalid_argument, where + "was chunked as " + chunking_text(a) + ", this run as " +
                                                 chunking_text(b) + " (give the base's --ctx and --chunks)");
  const auto diff = std::mismatch(base.tokens.begin(), base.tokens.end(), cur.tokens.begin(), cur.tokens.end());
  if (diff.first != base.tokens.end() || diff.second != cur.tokens.end()) {
    const auto pos = diff.first - base.tokens.begin();
    throw Error(ErrorCode::invalid_argument,
                where + "scored other tokens: token " + std::to_string(pos) + " differs (base text " + base.text +
                    ", this text " + cur.text + "): another text or tokenizer");
  }
}

LogitsWriter::LogitsWriter(const std::filesystem::path& path, const RunIdentity& id)
    : path_(path), out_(path, std::ios::binary | std::ios::trunc), vocab_size_(id.vocab_size) {
  if (!out_) bad(path, "cannot create it");
  rows_expected_ = static_cast<int64_t>(id.plan.num_chunks) * id.plan.num_scored();
  const std::string header = header_json(id).dump();
  const uint32_t header_bytes = static_cast<uint32_t>(header.size());
  out_.write(kMagic, sizeof(kMagic));
  out_.write(reinterpret_cast<const char*>(&kVersion), 4);
  out_.write(reinterpret_cast<const char*>(&header_bytes), 4);
  out_.write(header.data(), static_cast<std::streamsize>(header.size()));
  out_.write(reinterpret_cast<const char*>(id.tokens.data()),
             static_cast<std::streamsize>(id.tokens.size() * sizeof(int32_t)));
  buffer_.resize(static_cast<size_t>(vocab_size_));
  if (!out_) bad(path, "write failed");
}

void LogitsWriter::write_row(int32_t argmax, double nll, std::span<const double> log_probs) {
  const float nll32 = static_cast<float>(nll);
  for (int32_t i = 0; i < vocab_size_; ++i)
    buffer_[static_cast<size_t>(i)] = f32_to_f16(static_cast<float>(std::max(log_probs[static_cast<size_t>(i)], -65000.0)));
  out_.write(reinterpret_cast<const char*>(&argmax), 4);
  out_.write(reinterpret_cast<const char*>(&nll32), 4);
  out_.write(reinterpret_cast<const char*>(buffer_.data()), static_cast<std::streamsize>(buffer_.size() * 2));
  ++rows_written_;
}

void LogitsWriter::finish() {
  out_.flush();
  if (!out_) bad(path_, "write failed");
  if (rows_written_ != rows_expected_)
    bad(path_, std::to_string(rows_written_) + " rows written of " + std::to_string(rows_expected_));
  out_.close();
}

LogitsReader::LogitsReader(const std::filesystem::path& path) : path_(path), in_(path, std::ios::binary) {
  if (!in_) bad(path, "cannot open it");
  char magic[8] = {};
  uint32_t version = 0, header_bytes = 0;
  in_.read(magic, 8);
  in_.read(reinterpret_cast<char*>(&version), 4);
  in_.read(reinterpret_cast<char*>(&header_bytes), 4);
  if (!in_ || std::memcmp(magic, kMagic, 8) != 0) bad(path, "not a file written by llmk eval --save-logits");
  if (version != kVersion)
    bad(path, "version " + std::to_string(version) + "; this llmk reads version " + std::to_string(kVersion));
  std::string header(header_bytes, '\0');
  in_.read(header.data(), header_bytes);
  if (!in_) bad(path, "truncated header");
  try {
    const nlohmann::json j = nlohmann::json::parse(header);
    RunIdentity& id = identity_;
    id.model = j.at("model");
    id.architecture = j.at("architecture");
    id.vocab_size = j.at("vocab_size");
    id.num_layers = j.at("num_layers");
    id.hidden_size = j.at("hidden_size");
    id.num_heads = j.at("num_heads");
    id.num_kv_heads = j.at("num_kv_heads");
    id.text = j.at("text");
    id.config = j.at("config");
    id.plan.ctx = j.at("ctx");
    id.plan.num_chunks = j.at("num_chunks");
    id.plan.first_scored = j.at("first_scored");
    id.plan.bos_id = j.at("bos_id");
    id.tokens.resize(j.at("num_tokens").get<size_t>());
  } catch (const nlohmann::json::exception& e) {
    bad(path, std::string("bad header: ") + e.what());
  }
  const ChunkPlan& p = identity_.plan;
  if (identity_.vocab_size <= 0 || p.ctx < 4 || p.num_chunks < 1 || p.first_scored < 1 || p.first_scored >= p.ctx - 1 ||
      static_cast<int64_t>(identity_.tokens.size()) != p.num_tokens())
    bad(path, "inconsistent header (vocab, ctx, chunks, tokens)");
  in_.read(reinterpret_cast<char*>(identity_.tokens.data()),
           static_cast<std::streamsize>(identity_.tokens.size() * sizeof(int32_t)));
  const auto rows_start = static_cast<uintmax_t>(in_.tellg());
  const uintmax_t want =
      rows_start + static_cast<uintmax_t>(p.num_chunks) * p.num_scored() * row_bytes(identity_.vocab_size);
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (!in_ || ec || size != want)
    bad(path, "is " + std::to_string(size) + " bytes; its header promises " + std::to_string(want) +
                  " (truncated or not one run)");
  buffer_.resize(static_cast<size_t>(identity_.vocab_size));
}

void LogitsReader::read_row(Row& row) {
  in_.read(reinterpret_cast<char*>(&row.argmax), 4);
  in_.read(reinterpret_cast<char*>(&row.nll), 4);
  in_.read(reinterpret_cast<char*>(buffer_.data()), static_cast<std::streamsize>(buffer_.size() * 2));
  if (!in_) bad(path_, "read past its last row");
  row.log_probs.resize(buffer_.size());
  for (size_t i = 0; i < buffer_.size(); ++i) row.log_probs[i] = f16_to_f32(buffer_[i]);
}

}  // namespace llmk::eval
