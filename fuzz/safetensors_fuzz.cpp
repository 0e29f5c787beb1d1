// libFuzzer harness for the safetensors reader: any file either loads with
// every entry's dtype, shape and offsets inside the buffer, or throws
// llmk::Error naming what is wrong. The reader maps a path, so each input is
// written to a file in memory first.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = [] {
    const int fd = memfd_create("safetensors_fuzz", 0);
    return "/proc/self/fd/" + std::to_string(fd);
  }();
  const int fd = std::stoi(path.substr(path.rfind('/') + 1));
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) return 0;
  try {
    const llmk::SafetensorsFile file(path);
    for (const auto& [name, entry] : file.entries())
      if (entry.end < entry.begin) __builtin_trap();  // validated: offsets are ordered
  } catch (const llmk::Error&) {
  }
  return 0;
}
