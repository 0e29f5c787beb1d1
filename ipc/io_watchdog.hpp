// Deadlines for blocking socket I/O. A connection thread arms the watchdog
// around each blocking read or write; if the operation is still running
// when its deadline passes, the watchdog shuts the socket down, so the
// blocked call returns with an error and the thread is free again. A client
// that sends half a request and stalls, or stops reading a stream, costs
// the server one thread for at most the timeout.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

namespace llmk::ipc {

class IoWatchdog {
 public:
  using Clock = std::chrono::steady_clock;

  IoWatchdog();
  ~IoWatchdog();
  IoWatchdog(const IoWatchdog&) = delete;
  IoWatchdog& operator=(const IoWatchdog&) = delete;

  // While it lives, `fd` is shut down (both ways) once `timeout` passes.
  // It must not outlive the socket.
  class Armed {
   public:
    Armed(IoWatchdog* watchdog, int fd, std::chrono::milliseconds timeout);
    ~Armed();
    Armed(const Armed&) = delete;
    Armed& operator=(const Armed&) = delete;

   private:
    IoWatchdog* watchdog_;
    int fd_;
  };

  size_t num_expired() const;  // sockets shut down so far

 private:
  void run();

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int, Clock::time_point> deadlines_;
  size_t num_expired_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace llmk::ipc
