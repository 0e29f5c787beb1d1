#include "plugins/comm_mpi/mpi_driver.hpp"

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "plugins/api/plugin_helpers.hpp"

namespace llmk::comm {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kPingTag = 1;
constexpr int kPongTagBase = 2;  // + probe id modulo kPongTags
constexpr int kPongTags = 30000;
// How long a probed peer has to answer, at most (a live driver answers within
// milliseconds: its idle loop and every wait poll for probes).
constexpr double kProbeWindowS = 3.0;
// A caller spins this long for a short job before it sleeps, and the MPI
// thread stays awake this long after a job for the next one. (0, 50 and
// 500 us measured alike on TinyLlama at tensor 2 on two cores, within that
// machine's run-to-run spread: short enough to take little from
// oversubscribed cores, long enough for a burst of small calls.)
constexpr auto kSpin = std::chrono::microseconds(50);
constexpr auto kHotSpin = std::chrono::microseconds(50);
// A wait on peers polls its requests back to back (yielding the core) for
// this long, then naps between polls. A collective's peers are usually
// there within microseconds and a large transfer needs every poll to make
// progress (nonblocking operations advance only inside MPI calls), while a
// pipeline stage waiting for the previous one's compute waits milliseconds,
// and on an oversubscribed machine a spinning waiter takes the core that
// compute needs. The nap is short enough to leave a transfer's progress
// nearly whole.
constexpr double kBusyPollS = 2e-3;
constexpr auto kPollNap = std::chrono::microseconds(50);

std::mutex instance_mutex;
std::weak_ptr<MpiDriver> instance;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", s);
  return text;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

std::shared_ptr<MpiDriver> MpiDriver::acquire() {
  std::lock_guard lock(instance_mutex);
  if (auto existing = instance.lock()) return existing;
  std::shared_ptr<MpiDriver> driver(new MpiDriver());
  if (!driver->init_error_.empty()) throw plugin::Error(LLMK_ERR_UNSUPPORTED, driver->init_error_);
  instance = driver;
  return driver;
}

MpiDriver::MpiDriver() {
  // The host opens plugins with RTLD_LOCAL; Open MPI's components (opened by
  // libmpi itself) look for libmpi's symbols globally, so promote it.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&MPI_Init_thread), &info) != 0 && info.dli_fname != nullptr)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);

  std::promise<void> started;
  auto ready = started.get_future();
  thread_ = std::thread([this, &started] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    int provided = 0;
    if (initialized == 0 && MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      init_error_ = "MPI_Init_thread failed";
      started.set_value();
      return;
    }
    if (initialized != 0) {
      MPI_Query_thread(&provided);
      if (provided < MPI_THREAD_MULTIPLE) {
        init_error_ = "MPI was initialized by someone else without MPI_THREAD_MULTIPLE; comm.mpi calls it from its own thread";
        started.set_value();
        return;
      }
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
    MPI_Comm_dup(MPI_COMM_WORLD, &control_);
    MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN);
    MPI_Irecv(ping_in_, 2, MPI_INT64_T, MPI_ANY_SOURCE, kPingTag, control_, &ping_request_);
    started.set_value();
    loop();
  });
  ready.wait();
  if (!init_error_.empty()) thread_.join();
}

MpiDriver::~MpiDriver() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MpiDriver::loop() {
  auto last_job = Clock::now();
  for (;;) {
    if (const std::function<void()>* job = job_.exchange(nullptr, std::memory_order_acquire)) {
      in_call_ = true;
      calls_entered_.fetch_add(1);
      try {
        (*job)();
      } catch (...) {
        job_error_ = std::current_exception();
      }
      in_call_ = false;
      jobs_done_.fetch_add(1, std::memory_order_release);
      jobs_done_.notify_all();
      last_job = Clock::now();
      continue;
    }
    if (stop_) break;
    answer_probes();
    // A forward posts its collectives every few hundred microseconds: stay
    // awake a little (yielding the core to runnable threads), then sleep.
    if (Clock::now() - last_job < kHotSpin) {
      sched_yield();
      continue;
    }
    std::unique_lock lock(mutex_);
    if (job_.load(std::memory_order_acquire) == nullptr && !stop_) wake_.wait_for(lock, std::chrono::milliseconds(2));
  }
  // Shut down: the pending probe receive, then MPI itself (when this driver
  // initialized it).
  if (ping_request_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&ping_request_);
    MPI_Request_free(&ping_request_);
  }
  for (MPI_Request& r : pong_requests_)
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  MPI_Comm_free(&control_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized == 0) MPI_Finalize();
}

void MpiDriver::run(const std::function<void()>& job) {
  std::lock_guard one_at_a_time(callers_);
  const uint64_t done = jobs_done_.load(std::memory_order_acquire);
  job_.store(&job, std::memory_order_release);
  {
    std::lock_guard lock(mutex_);  // a sleeping driver wakes; an awake one sees job_ first
  }
  wake_.notify_one();
  // Spin a little (yielding, so an oversubscribed core runs its other
  // threads), then sleep until the driver says it is done.
  const auto spin_until = Clock::now() + kSpin;
  while (jobs_done_.load(std::memory_order_acquire) == done && Clock::now() < spin_until) sched_yield();
  for (uint64_t now = jobs_done_.load(std::memory_order_acquire); now == done;
       now = jobs_done_.load(std::memory_order_acquire))
    jobs_done_.wait(now, std::memory_order_acquire);
  if (job_error_) std::rethrow_exception(std::exchange(job_error_, nullptr));
}

void MpiDriver::answer_probes() {
  for (;;) {
    int arrived = 0;
    MPI_Status status;
    if (ping_request_ == MPI_REQUEST_NULL || MPI_Test(&ping_request_, &arrived, &status) != MPI_SUCCESS || !arrived)
      break;
    auto pong = std::make_unique<int64_t[]>(3);
    pong[0] = ping_in_[0];
    pong[1] = in_call_ ? 1 : 0;
    pong[2] = calls_entered_.load();
    MPI_Request request;
    const int tag = kPongTagBase + static_cast<int>(ping_in_[0] % kPongTags);
    MPI_Isend(pong.get(), 3, MPI_INT64_T, status.MPI_SOURCE, tag, control_, &request);
    pong_out_.push_back(std::move(pong));
    pong_requests_.push_back(request);
    MPI_Irecv(ping_in_, 2, MPI_INT64_T, MPI_ANY_SOURCE, kPingTag, control_, &ping_request_);
  }
  // Pongs delivered: their buffers go.
  for (size_t i = 0; i < pong_requests_.size();) {
    int sent = 0;
    MPI_Test(&pong_requests_[i], &sent, MPI_STATUS_IGNORE);
    if (sent) {
      pong_requests_.erase(pong_requests_.begin() + static_cast<std::ptrdiff_t>(i));
      pong_out_.erase(pong_out_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

std::vector<int> MpiDriver::probe(const std::vector<int>& peers, std::string& states) {
  const int64_t id = next_probe_++;
  const int tag = kPongTagBase + static_cast<int>(id % kPongTags);
  std::vector<std::array<int64_t, 3>> answers(peers.size());
  std::vector<MPI_Request> sends(peers.size(), MPI_REQUEST_NULL), recvs(peers.size(), MPI_REQUEST_NULL);
  const int64_t ping[2] = {id, world_rank_};
  for (size_t i = 0; i < peers.size(); ++i) {
    MPI_Isend(ping, 2, MPI_INT64_T, peers[i], kPingTag, control_, &sends[i]);
    MPI_Irecv(answers[i].data(), 3, MPI_INT64_T, peers[i], tag, control_, &recvs[i]);
  }
  std::vector<bool> answered(peers.size(), false);
  const auto start = Clock::now();
  size_t count = 0;
  while (count < peers.size() && seconds_since(start) < kProbeWindowS) {
    answer_probes();
    for (size_t i = 0; i < peers.size(); ++i) {
      if (answered[i]) continue;
      int done = 0;
      if (MPI_Test(&recvs[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) {
        answered[i] = true;
        ++count;
      }
    }
    sched_yield();
  }
  std::vector<int> silent;
  for (size_t i = 0; i < peers.size(); ++i) {
    if (answered[i]) {
      states += (states.empty() ? "" : "; ") + std::string("rank ") + std::to_string(peers[i]) +
                (answers[i][1] ? " is in a call" : " is not in a call") + " (" + std::to_string(answers[i][2]) +
                " calls entered)";
    } else {
      silent.push_back(peers[i]);
      // The job ends; these stay unmatched.
      MPI_Cancel(&recvs[i]);
      MPI_Request_free(&recvs[i]);
    }
    if (sends[i] != MPI_REQUEST_NULL) MPI_Request_free(&sends[i]);
  }
  return silent;
}

void MpiDriver::wait(std::vector<MPI_Request>& requests, const std::vector<int>& peers, double timeout_s,
                     const std::string& what) {
  auto since = Clock::now();
  const auto started = since;
  for (;;) {
    int done = 0;
    const int rc = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, text, &len);
      throw plugin::Error(LLMK_ERR_PEER_LOST, what + " failed on world rank " + std::to_string(world_rank_) +
                                                  ": " + std::string(text, static_cast<size_t>(len)));
    }
    if (done) return;
    answer_probes();
    if (timeout_s > 0 && seconds_since(since) >= timeout_s) {
      std::string states;
      const std::vector<int> silent = probe(peers, states);
      if (!silent.empty()) {
        throw plugin::Error(LLMK_ERR_PEER_LOST,
                            what + ": rank" + (silent.size() > 1 ? "s " : " ") + rank_list(silent) +
                                " did not answer (dead, stopped or unreachable) after " +
                                std::to_string(static_cast<int>(seconds_since(started))) +
                                " s of waiting (timeout " + seconds_text(timeout_s) + " s)");
      }
      std::fprintf(stderr, "comm.mpi: rank %d has waited %.0f s in %s; every peer answers: %s\n", world_rank_,
                   seconds_since(started), what.c_str(), states.c_str());
      since = Clock::now();
    }
    if (seconds_since(started) < kBusyPollS) sched_yield();
    else std::this_thread::sleep_for(kPollNap);
  }
}

void MpiDriver::abort(MPI_Comm comm, int code) {
  std::unique_lock one_at_a_time(callers_, std::defer_lock);
  if (one_at_a_time.try_lock_for(std::chrono::seconds(1))) {
    std::function<void()> job = [comm, code] { MPI_Abort(comm, code); };
    one_at_a_time.unlock();
    run(job);
  }
  // The driver is stuck in a call: the job ends anyway.
  MPI_Abort(comm, code);
  std::_Exit(code);
}

}  // namespace llmk::comm
