// The one thread of a process that calls MPI.
//
// MPI is initialized with MPI_THREAD_FUNNELED on this thread and every later
// MPI call runs here: a caller (any thread: actors move between threads)
// hands the driver a job and waits for it. A job posts nonblocking
// operations and waits on them with wait(), which also answers the liveness
// probes of other ranks and enforces the timeout:
//
// - Every driver keeps a receive posted on a private duplicate of
//   MPI_COMM_WORLD for probes ("ping"), and answers each with a "pong" that
//   says whether it is inside a call and how many calls it has entered.
//   It answers while idle too (the idle loop wakes every few milliseconds).
// - A wait that lasts longer than the timeout probes the peers it waits on.
//   Peers that do not answer within the probe window (dead, stopped,
//   unreachable) fail the call with LLMK_ERR_PEER_LOST naming them. Peers
//   that answer are alive and merely late (loading, or busy with a longer
//   step): the wait goes on, with one warning per timeout period.
#pragma once

#include <mpi.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace llmk::comm {

class MpiDriver {
 public:
  // The process's driver, started (and MPI initialized) on first use; it
  // finalizes MPI when the last holder lets go.
  static std::shared_ptr<MpiDriver> acquire();
  ~MpiDriver();
  MpiDriver(const MpiDriver&) = delete;
  MpiDriver& operator=(const MpiDriver&) = delete;

  // Runs job on the MPI thread and returns when it has, rethrowing what it threw.
  void run(const std::function<void()>& job);

  // On the MPI thread, inside a job: completes `requests`, probing the
  // world ranks in `peers` after each `timeout_s` (0: wait forever). `what`
  // names the call in errors ("all_reduce of 768 f32").
  void wait(std::vector<MPI_Request>& requests, const std::vector<int>& peers, double timeout_s,
            const std::string& what);

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // MPI_Abort from the MPI thread, or from the caller's if the driver is busy past a second.
  [[noreturn]] void abort(MPI_Comm comm, int code);

 private:
  MpiDriver();
  void loop();
  void answer_probes();      // MPI thread: pings received so far get their pongs
  std::vector<int> probe(const std::vector<int>& peers, std::string& states);  // ranks that did not answer

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;  // the MPI thread sleeps on it when no job came for a while
  std::atomic<const std::function<void()>*> job_{nullptr};  // the job posted, until the MPI thread takes it
  std::exception_ptr job_error_;  // written by the MPI thread before jobs_done_ moves
  std::atomic<uint64_t> jobs_done_{0};
  std::atomic<bool> stop_{false};
  std::timed_mutex callers_;  // one job at a time

  // MPI thread only.
  MPI_Comm control_ = MPI_COMM_NULL;
  MPI_Request ping_request_ = MPI_REQUEST_NULL;
  int64_t ping_in_[2] = {0, 0};  // probe id, prober's rank
  std::vector<std::unique_ptr<int64_t[]>> pong_out_;
  std::vector<MPI_Request> pong_requests_;
  int64_t next_probe_ = 1;

  std::atomic<int64_t> calls_entered_{0};
  std::atomic<bool> in_call_{false};
  int world_rank_ = 0, world_size_ = 1;
  std::string init_error_;
};

}  // namespace llmk::comm
