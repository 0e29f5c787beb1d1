// A many-producer, one-consumer queue whose consumer can wait on it with
// zmq::poll next to its sockets (through an eventfd). Producers (backend
// threads, API callers) never touch a ZeroMQ socket: sockets are not
// thread-safe, so each belongs to one thread that drains its mailbox.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>
#include <system_error>
#include <utility>
#include <vector>

namespace llmk::ipc {

template <class T>
class Mailbox {
 public:
  Mailbox() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  }
  ~Mailbox() { ::close(fd_); }
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  void post(T item) {
    {
      std::lock_guard lock(mutex_);
      items_.push_back(std::move(item));
    }
    wake();
  }
  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(fd_, &one, sizeof one);
  }
  // Everything posted so far, oldest first; resets the eventfd.
  std::vector<T> take() {
    uint64_t count = 0;
    [[maybe_unused]] auto n = ::read(fd_, &count, sizeof count);
    std::lock_guard lock(mutex_);
    return std::exchange(items_, {});
  }
  int fd() const { return fd_; }  // readable while something is posted

 private:
  int fd_;
  std::mutex mutex_;
  std::vector<T> items_;
};

}  // namespace llmk::ipc
