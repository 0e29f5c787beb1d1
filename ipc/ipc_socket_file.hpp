// The file behind a ZeroMQ socket bound to an ipc:// endpoint. libzmq 4.3
// leaves a bound Unix-domain socket's file in place when the socket closes
// (and when it is unbound), so servers restarted on /tmp paths piled them
// up. The owner of a bound socket keeps one of these beside it: when it goes,
// it removes the file, but only while the path still names the very file
// this socket created (same device and inode): another process that has
// bound the same path since keeps its own.
#pragma once

#include <sys/types.h>

#include <string>

namespace llmk::ipc {

class IpcSocketFile {
 public:
  IpcSocketFile() = default;
  // `bound_endpoint`: the socket's last_endpoint after bind. Anything but
  // ipc:// (tcp, inproc) is nothing to remove.
  explicit IpcSocketFile(const std::string& bound_endpoint);
  ~IpcSocketFile();
  IpcSocketFile(IpcSocketFile&& other) noexcept;
  IpcSocketFile& operator=(IpcSocketFile&& other) noexcept;
  IpcSocketFile(const IpcSocketFile&) = delete;
  IpcSocketFile& operator=(const IpcSocketFile&) = delete;

  const std::string& path() const { return path_; }  // "" when nothing is owned

 private:
  void remove() noexcept;

  std::string path_;
  dev_t device_ = 0;
  ino_t inode_ = 0;
};

}  // namespace llmk::ipc
