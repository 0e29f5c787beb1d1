#include "ipc/ipc_socket_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <utility>

namespace llmk::ipc {

IpcSocketFile::IpcSocketFile(const std::string& bound_endpoint) {
  const std::string scheme = "ipc://";
  if (bound_endpoint.compare(0, scheme.size(), scheme) != 0) return;
  const std::string path = bound_endpoint.substr(scheme.size());
  struct stat st {};
  // An abstract socket (@name) has no file; a path that is not a socket now
  // is not ours to remove.
  if (path.empty() || path[0] == '@' || ::stat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return;
  path_ = path;
  device_ = st.st_dev;
  inode_ = st.st_ino;
}

IpcSocketFile::~IpcSocketFile() { remove(); }

IpcSocketFile::IpcSocketFile(IpcSocketFile&& other) noexcept
    : path_(std::exchange(other.path_, {})), device_(other.device_), inode_(other.inode_) {}

IpcSocketFile& IpcSocketFile::operator=(IpcSocketFile&& other) noexcept {
  if (this != &other) {
    remove();
    path_ = std::exchange(other.path_, {});
    device_ = other.device_;
    inode_ = other.inode_;
  }
  return *this;
}

void IpcSocketFile::remove() noexcept {
  if (path_.empty()) return;
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && st.st_dev == device_ && st.st_ino == inode_) ::unlink(path_.c_str());
  path_.clear();
}

}  // namespace llmk::ipc
