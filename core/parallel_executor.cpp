#include "core/parallel_executor.hpp"

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "core/openmp.hpp"

namespace llmk {

namespace {

// What rank 0 announces; each announcement is a fixed header broadcast to
// the world, then (when payload_bytes > 0) the payload.
enum class Command : uint64_t { stop = 0, step = 1, save_kv = 2, restore_kv = 3, keep_alive = 4 };

struct Header {
  uint64_t command = 0;
  uint64_t payload_bytes = 0;
};

// A StepBatch as one array of int32: sizes first, then the arrays in order.
void put(std::vector<int32_t>& out, const std::vector<int32_t>& v) { out.insert(out.end(), v.begin(), v.end()); }

std::vector<uint8_t> encode(const StepBatch& b) {
  std::vector<int32_t> w = {b.num_tokens(),
                            b.num_seqs(),
                            b.num_logits(),
                            b.max_blocks_per_seq,
                            b.block_size,
                            static_cast<int32_t>(b.kv_copies.size()),
                            static_cast<int32_t>(b.block_tables.size()),
                            static_cast<int32_t>(b.query_start.size())};
  put(w, b.token_ids);
  put(w, b.positions);
  put(w, b.query_start);
  put(w, b.context_lens);
  put(w, b.slot_mapping);
  put(w, b.block_tables);
  put(w, b.logits_rows);
  for (const llmk_kv_copy& c : b.kv_copies) w.insert(w.end(), {c.src_slot, c.dst_slot, c.num_slots});
  std::vector<uint8_t> bytes(w.size() * 4);
  std::memcpy(bytes.data(), w.data(), bytes.size());
  return bytes;
}

StepBatch decode(const std::vector<uint8_t>& bytes) {
  std::vector<int32_t> w(bytes.size() / 4);
  std::memcpy(w.data(), bytes.data(), w.size() * 4);
  size_t at = 0;
  auto next = [&](size_t count) {
    if (at + count > w.size()) throw Error(ErrorCode::internal, "parallel: a step message shorter than its sizes");
    std::vector<int32_t> v(w.begin() + static_cast<std::ptrdiff_t>(at), w.begin() + static_cast<std::ptrdiff_t>(at + count));
    at += count;
    return v;
  };
  const std::vector<int32_t> sizes = next(8);
  const auto tokens = static_cast<size_t>(sizes[0]), seqs = static_cast<size_t>(sizes[1]),
             logits = static_cast<size_t>(sizes[2]), copies = static_cast<size_t>(sizes[5]),
             tables = static_cast<size_t>(sizes[6]), starts = static_cast<size_t>(sizes[7]);
  StepBatch b;
  b.max_blocks_per_seq = sizes[3];
  b.block_size = sizes[4];
  b.token_ids = next(tokens);
  b.positions = next(tokens);
  b.query_start = next(starts);
  b.context_lens = next(seqs);
  b.slot_mapping = next(tokens);
  b.block_tables = next(tables);
  b.logits_rows = next(logits);
  const std::vector<int32_t> c = next(copies * 3);
  for (size_t i = 0; i < copies; ++i) b.kv_copies.push_back(llmk_kv_copy{c[3 * i], c[3 * i + 1], c[3 * i + 2]});
  return b;
}

void announce(Communicator& world, Command command, const std::vector<uint8_t>& payload) {
  Header h{static_cast<uint64_t>(command), payload.size()};
  world.broadcast(&h, sizeof(h), DType::u8, 0);
  if (!payload.empty()) world.broadcast(const_cast<uint8_t*>(payload.data()), payload.size(), DType::u8, 0);
}

std::vector<uint8_t> slots_bytes(const std::vector<int32_t>& slots) {
  std::vector<uint8_t> bytes(slots.size() * 4);
  std::memcpy(bytes.data(), slots.data(), bytes.size());
  return bytes;
}

// Every rank's save of `slots` at rank 0: [u64 ranks][u64 bytes of each][each rank's bytes].
std::vector<uint8_t> gather_saves(Communicator& world, const std::vector<uint8_t>& mine) {
  const int32_t size = world.size();
  std::vector<uint64_t> sizes(static_cast<size_t>(size));
  const uint64_t my_size = mine.size();
  world.all_gather(&my_size, sizes.data(), 8, DType::u8);
  if (world.rank() != 0) {
    world.send(mine.data(), mine.size(), DType::u8, 0);
    return {};
  }
  uint64_t total = 8 + 8 * static_cast<uint64_t>(size);
  for (uint64_t s : sizes) total += s;
  std::vector<uint8_t> out(total);
  const uint64_t ranks = static_cast<uint64_t>(size);
  std::memcpy(out.data(), &ranks, 8);
  std::memcpy(out.data() + 8, sizes.data(), 8 * sizes.size());
  size_t at = 8 + 8 * sizes.size();
  std::memcpy(out.data() + at, mine.data(), mine.size());
  at += mine.size();
  for (int32_t r = 1; r < size; ++r) {
    world.recv(out.data() + at, sizes[static_cast<size_t>(r)], DType::u8, r);
    at += sizes[static_cast<size_t>(r)];
  }
  return out;
}

// Rank `rank`'s part of a gather_saves() buffer.
std::vector<uint8_t> part_of(const std::vector<uint8_t>& all, int32_t rank) {
  uint64_t ranks = 0;
  if (all.size() < 8) throw Error(ErrorCode::invalid_argument, "restore_kv: not a parallel job's KV save");
  std::memcpy(&ranks, all.data(), 8);
  if (static_cast<uint64_t>(rank) >= ranks || all.size() < 8 + 8 * ranks)
    throw Error(ErrorCode::invalid_argument, "restore_kv: a KV save of " + std::to_string(ranks) + " ranks");
  std::vector<uint64_t> sizes(ranks);
  std::memcpy(sizes.data(), all.data() + 8, 8 * ranks);
  size_t at = 8 + 8 * ranks;
  for (int32_t r = 0; r < rank; ++r) at += sizes[static_cast<size_t>(r)];
  return std::vector<uint8_t>(all.begin() + static_cast<std::ptrdiff_t>(at),
                              all.begin() + static_cast<std::ptrdiff_t>(at + sizes[static_cast<size_t>(rank)]));
}

}  // namespace

ParallelExecutor::ParallelExecutor(std::unique_ptr<Executor> local, std::shared_ptr<ParallelJob> job,
                                   double timeout_s)
    : local_(std::move(local)), job_(std::move(job)), timeout_s_(timeout_s),
      last_call_(std::chrono::steady_clock::now()) {
  if (timeout_s_ > 0) keeper_ = std::thread([this] { keep_alive(); });
}

ParallelExecutor::~ParallelExecutor() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (keeper_.joinable()) keeper_.join();
  if (job_->failed()) return;  // the job ends by abort, not by a stop
  try {
    std::lock_guard lock(mutex_);
    announce(job_->world(), Command::stop, {});
  } catch (const std::exception& e) {
    spdlog::error("parallel: could not stop the other ranks: {}", e.what());
  }
}

// Runs fn under the announcement lock; a failure of the job (a lost peer,
// or any error once the other ranks were told to run the call) fails every
// later call with the same error.
template <class Fn>
auto ParallelExecutor::guarded(Fn&& fn) {
  std::lock_guard lock(mutex_);
  if (job_->failed()) throw Error(ErrorCode::peer_lost, "the parallel job failed: " + job_->failure());
  last_call_ = std::chrono::steady_clock::now();
  try {
    return fn();
  } catch (const std::exception& e) {
    job_->fail(e.what());
    throw Error(ErrorCode::peer_lost, "the parallel job failed: " + std::string(e.what()));
  }
}

LogitsView ParallelExecutor::execute(const StepBatch& batch, const SampledIds& previous) {
  // Checked before the other ranks hear of it: from here on, an error leaves
  // the ranks out of step and ends the job.
  const StepBatch* step = &batch;
  if (!batch.fed_back.empty()) {
    // The other ranks hear the ids themselves: a device's come to the host
    // first (waiting for the previous step's sampling to finish).
    validate_fed_back(batch, previous, previous.device);
    if (!previous.failed) {
      previous_ids_.resize(static_cast<size_t>(previous.count));
      local_->copy_ids_to_host(previous, previous_ids_.data());
    }
    resolved_ = batch;
    resolved_.fed_back.clear();
    for (const FedBackToken& f : batch.fed_back)
      resolved_.token_ids.at(static_cast<size_t>(f.row)) =
          previous.failed ? 0 : previous_ids_[static_cast<size_t>(f.previous_row)];
    step = &resolved_;
  }
  const ModelRuntime& rt = local_->runtime();
  validate_step(*step, local_->model_config().vocab_size, rt.max_seq_len, rt.max_step_tokens);
  return guarded([&] {
    announce(job_->world(), Command::step, encode(*step));
    return local_->execute(*step);
  });
}

std::vector<uint8_t> ParallelExecutor::save_kv(const std::vector<int32_t>& slots) {
  return guarded([&] {
    announce(job_->world(), Command::save_kv, slots_bytes(slots));
    return gather_saves(job_->world(), local_->save_kv(slots));
  });
}

void ParallelExecutor::restore_kv(const std::vector<int32_t>& slots, const std::vector<uint8_t>& data) {
  const std::vector<uint8_t> mine = part_of(data, 0);
  guarded([&] {
    std::vector<uint8_t> payload = slots_bytes(slots);
    const uint64_t count = slots.size();
    payload.insert(payload.begin(), reinterpret_cast<const uint8_t*>(&count), reinterpret_cast<const uint8_t*>(&count) + 8);
    payload.insert(payload.end(), data.begin(), data.end());
    announce(job_->world(), Command::restore_kv, payload);
    local_->restore_kv(slots, mine);
    return 0;
  });
}

std::string ParallelExecutor::describe() const { return local_->describe() + "; " + job_->describe(); }

void ParallelExecutor::keep_alive() {
  const auto period = std::chrono::duration<double>(timeout_s_ / 3);
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, period);
    if (stopping_ || job_->failed()) continue;
    if (std::chrono::steady_clock::now() - last_call_ < period) continue;
    try {
      announce(job_->world(), Command::keep_alive, {});
      job_->world().barrier();  // every rank answers: a lost one is found
      last_call_ = std::chrono::steady_clock::now();
    } catch (const std::exception& e) {
      job_->fail(e.what());
    }
  }
}

int serve_parallel_steps(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint,
                         PluginRegistry& plugins, std::shared_ptr<ParallelJob> job) {
  Communicator& world = job->world();
  try {
    const std::unique_ptr<Executor> shard = make_shard_executor(cfg, std::move(checkpoint), plugins, job);
    Executor& local = *shard;
    spdlog::info("parallel: {} serves rank 0's steps: {}", job->describe(), local.describe());
    for (;;) {
      Header h;
      world.broadcast(&h, sizeof(h), DType::u8, 0);
      std::vector<uint8_t> payload(h.payload_bytes);
      if (!payload.empty()) world.broadcast(payload.data(), payload.size(), DType::u8, 0);
      switch (static_cast<Command>(h.command)) {
        case Command::stop: spdlog::info("parallel: rank 0 stopped the job"); return 0;
        case Command::step: local.execute(decode(payload)); break;
        case Command::save_kv: {
          std::vector<int32_t> slots(payload.size() / 4);
          std::memcpy(slots.data(), payload.data(), slots.size() * 4);
          gather_saves(world, local.save_kv(slots));
          break;
        }
        case Command::restore_kv: {
          uint64_t count = 0;
          std::memcpy(&count, payload.data(), 8);
          std::vector<int32_t> slots(count);
          std::memcpy(slots.data(), payload.data() + 8, count * 4);
          const std::vector<uint8_t> all(payload.begin() + static_cast<std::ptrdiff_t>(8 + count * 4), payload.end());
          local.restore_kv(slots, part_of(all, job->rank()));
          break;
        }
        case Command::keep_alive: world.barrier(); break;
        default: throw Error(ErrorCode::internal, "parallel: unknown command " + std::to_string(h.command));
      }
    }
  } catch (const std::exception& e) {
    // Out of step with rank 0, or a peer lost: the job cannot go on.
    job->fail(e.what());
    job->abort_job(1);
  }
}

}  // namespace llmk
