#include "ipc/io_watchdog.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace llmk::ipc {

IoWatchdog::IoWatchdog() : thread_([this] { run(); }) {}

IoWatchdog::~IoWatchdog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

IoWatchdog::Armed::Armed(IoWatchdog* watchdog, int fd, std::chrono::milliseconds timeout)
    : watchdog_(watchdog), fd_(fd) {
  if (watchdog_ == nullptr || timeout.count() <= 0) {
    watchdog_ = nullptr;
    return;
  }
  bool earliest = false;
  {
    std::lock_guard lock(watchdog_->mutex_);
    const auto deadline = Clock::now() + timeout;
    earliest = std::none_of(watchdog_->deadlines_.begin(), watchdog_->deadlines_.end(),
                            [&](const auto& d) { return d.second <= deadline; });
    watchdog_->deadlines_[fd_] = deadline;
  }
  if (earliest) watchdog_->changed_.notify_all();
}

IoWatchdog::Armed::~Armed() {
  if (watchdog_ == nullptr) return;
  std::lock_guard lock(watchdog_->mutex_);
  watchdog_->deadlines_.erase(fd_);
}

size_t IoWatchdog::num_expired() const {
  std::lock_guard lock(mutex_);
  return num_expired_;
}

void IoWatchdog::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    const auto now = Clock::now();
    auto next = Clock::time_point::max();
    for (auto it = deadlines_.begin(); it != deadlines_.end();) {
      if (it->second <= now) {
        // The blocked read or write returns with an error; the connection's
        // thread closes the socket as for any failed connection.
        ::shutdown(it->first, SHUT_RDWR);
        spdlog::debug("http: a connection's read or write stalled past its deadline; closed");
        ++num_expired_;
        it = deadlines_.erase(it);
      } else {
        next = std::min(next, it->second);
        ++it;
      }
    }
    if (next == Clock::time_point::max()) {
      changed_.wait(lock);
    } else {
      changed_.wait_until(lock, next);
    }
  }
}

}  // namespace llmk::ipc
