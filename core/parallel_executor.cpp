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
                            static_cast<int32_t>(b.query_start.size()),
                            static_cast<int32_t>(b.tree_parents.size())};
  put(w, b.token_ids);
  put(w, b.positions);
  put(w, b.query_start);
  put(w, b.context_lens);
  put(w, b.slot_mapping);
  put(w, b.block_tables);
  put(w, b.logits_rows);
  for (const llmk_kv_copy& c : b.kv_copies) w.insert(w.end(), {c.src_slot, c.dst_slot, c.num_slots});
  put(w, b.tree_parents);
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
  const std::vector<int32_t> sizes = next(9);
  const auto tokens = static_cast<size_t>(sizes[0]), seqs = static_cast<size_t>(sizes[1]),
             logits = static_cast<size_t>(sizes[2]), copies = static_cast<size_t>(sizes[5]),
             tables = static_cast<size_t>(sizes[6]), starts = static_cast<size_t>(sizes[7]),
             parents = static_cast<size_t>(sizes[8]);
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
  b.tree_parents = next(parents);
  return b;
}

// The way announcements travel (see the header): rank 0 broadcasts to its
// stage's tensor group, and each stage passes them on to its peer (the same
// tensor rank) in the next stage.
class CommandPath {
 public:
  explicit CommandPath(ParallelJob& job) : job_(job) {}

  // Rank 0: the announcement to the tensor group of stage 0.
  void announce(const Header& h, const std::vector<uint8_t>& payload) {
    if (job_.tensor() == 1) return;
    Header copy = h;
    job_.tensor_group().broadcast(&copy, sizeof(copy), DType::u8, 0);
    if (!payload.empty())
      job_.tensor_group().broadcast(const_cast<uint8_t*>(payload.data()), payload.size(), DType::u8, 0);
  }
  // Any other rank: the next announcement, from rank 0 or the stage before.
  void receive(Header& h, std::vector<uint8_t>& payload) {
    if (job_.stage() == 0) {
      job_.tensor_group().broadcast(&h, sizeof(h), DType::u8, 0);
      payload.resize(h.payload_bytes);
      if (!payload.empty()) job_.tensor_group().broadcast(payload.data(), payload.size(), DType::u8, 0);
      return;
    }
    const int32_t from = job_.world_rank(job_.stage() - 1, job_.tensor_rank());
    job_.world().recv(&h, sizeof(h), DType::u8, from);
    payload.resize(h.payload_bytes);
    if (!payload.empty()) job_.world().recv(payload.data(), payload.size(), DType::u8, from);
  }
  // To the next stage's peer (nothing on the last stage).
  void pass_on(const Header& h, const std::vector<uint8_t>& payload) {
    if (job_.stage() == job_.pipeline() - 1) return;
    const int32_t to = job_.world_rank(job_.stage() + 1, job_.tensor_rank());
    job_.world().send(&h, sizeof(h), DType::u8, to);
    if (!payload.empty()) job_.world().send(payload.data(), payload.size(), DType::u8, to);
  }
  // A stage's residual stream, to the next stage's peer.
  void send_rows(const float* rows, size_t count) {
    job_.world().send(rows, count, DType::f32, job_.world_rank(job_.stage() + 1, job_.tensor_rank()));
  }

 private:
  ParallelJob& job_;
};

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
    : local_(std::move(local)), job_(std::move(job)), timeout_s_(timeout_s), stages_(job_->pipeline()),
      last_call_(std::chrono::steady_clock::now()) {
  if (stages_ > 1) {
    for (int32_t i = 0; i < views_kept(); ++i) received_.push_back(std::make_shared<std::vector<float>>());
  }
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
    while (!pending_.empty()) receive_oldest();  // steps nobody waits for any more
    announce_call(static_cast<uint64_t>(Command::stop), {});
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

void ParallelExecutor::announce_call(uint64_t command, const std::vector<uint8_t>& payload) {
  if (!pending_.empty())
    throw Error(ErrorCode::internal, "parallel: a KV save, restore or stop while " +
                                         std::to_string(pending_.size()) + " steps are in flight");
  CommandPath path(*job_);
  const Header h{command, payload.size()};
  path.announce(h, payload);
  path.pass_on(h, payload);
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
  if (stages_ > 1) {
    // One step through the whole pipeline.
    if (!pending_.empty())
      throw Error(ErrorCode::internal, "execute: " + std::to_string(pending_.size()) +
                                           " pipelined steps are in flight (finish_oldest first)");
    start_step(*step);
    return finish_oldest();
  }
  const ModelRuntime& rt = local_->runtime();
  validate_step(*step, local_->model_config().vocab_size, rt.max_seq_len, rt.max_step_tokens);
  return guarded([&] {
    const std::vector<uint8_t> payload = encode(*step);
    CommandPath(*job_).announce(Header{static_cast<uint64_t>(Command::step), payload.size()}, payload);
    return local_->execute(*step);
  });
}

std::optional<LogitsView> ParallelExecutor::start_step(const StepBatch& batch) {
  if (stages_ == 1) return Executor::start_step(batch);
  if (!batch.fed_back.empty())
    throw Error(ErrorCode::invalid_argument, "start_step: a pipelined step has no fed-back rows");
  const ModelRuntime& rt = local_->runtime();
  validate_step(batch, local_->model_config().vocab_size, rt.max_seq_len, rt.max_step_tokens);
  {
    std::lock_guard lock(mutex_);
    if (static_cast<int32_t>(pending_.size()) >= stages_)
      throw Error(ErrorCode::internal, "start_step: " + std::to_string(stages_) +
                                           " steps are in flight already (finish_oldest first)");
  }
  return guarded([&] {
    CommandPath path(*job_);
    const std::vector<uint8_t> payload = encode(batch);
    const Header h{static_cast<uint64_t>(Command::step), payload.size()};
    path.announce(h, payload);
    std::optional<LogitsView> oldest;
    bool handed_over = false;
    local_->set_stage_handover([&](const float* rows, size_t count) {
      // The later stages hold one step each: the last one's logits must be
      // taken before this step can go on.
      if (static_cast<int32_t>(pending_.size()) == stages_ - 1) oldest = receive_oldest();
      path.pass_on(h, payload);
      path.send_rows(rows, count);
      handed_over = true;
    });
    // The hand-over refers to this frame: it goes however the step ends, so
    // a step that throws leaves none behind for a later call to run.
    struct HandoverReset {
      Executor& local;
      ~HandoverReset() { local.set_stage_handover({}); }
    } reset{*local_};
    local_->execute(batch);
    if (!handed_over) throw Error(ErrorCode::internal, "start_step: stage 0 did not hand the step on");
    pending_.push_back(batch.num_logits());
    return oldest;
  });
}

LogitsView ParallelExecutor::finish_oldest() {
  if (stages_ == 1) return Executor::finish_oldest();
  {
    std::lock_guard lock(mutex_);
    if (pending_.empty()) throw Error(ErrorCode::internal, "finish_oldest: no step in flight");
  }
  return guarded([&] { return receive_oldest(); });
}

LogitsView ParallelExecutor::receive_oldest() {
  const int32_t rows = pending_.front();
  pending_.pop_front();
  const int32_t vocab = local_->model_config().vocab_size;
  const std::shared_ptr<std::vector<float>>& buffer = received_[next_received_];
  next_received_ = (next_received_ + 1) % received_.size();
  const size_t count = static_cast<size_t>(rows) * static_cast<size_t>(vocab);
  if (buffer->size() < count) buffer->resize(count);
  if (count > 0) job_->world().recv(buffer->data(), count, DType::f32, job_->world_rank(stages_ - 1, 0));
  LogitsView view;
  view.device = Device::cpu;
  view.data = buffer->data();
  view.num_rows = rows;
  view.vocab_size = vocab;
  view.row_stride = vocab;
  view.keep_alive = buffer;
  return view;
}

std::vector<uint8_t> ParallelExecutor::save_kv(const std::vector<int32_t>& slots) {
  return guarded([&] {
    announce_call(static_cast<uint64_t>(Command::save_kv), slots_bytes(slots));
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
    announce_call(static_cast<uint64_t>(Command::restore_kv), payload);
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
    // Steps in flight: the next call waits on the last stage anyway.
    if (!pending_.empty() || std::chrono::steady_clock::now() - last_call_ < period) continue;
    try {
      announce_call(static_cast<uint64_t>(Command::keep_alive), {});
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
    CommandPath path(*job);
    Header h;
    std::vector<uint8_t> payload;
    // A step's announcement goes on with its residual stream, once computed.
    local.set_stage_handover([&](const float* rows, size_t count) {
      path.pass_on(h, payload);
      path.send_rows(rows, count);
    });
    for (;;) {
      path.receive(h, payload);
      const auto command = static_cast<Command>(h.command);
      if (command == Command::step) {
        local.execute(decode(payload));
        continue;
      }
      path.pass_on(h, payload);
      switch (command) {
        case Command::stop: spdlog::info("parallel: rank 0 stopped the job"); return 0;
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
