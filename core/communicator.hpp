// A communicator plugin's object as a C++ handle (plugins/api/llmk_comm.h):
// the world of an mpirun launch, and groups split from it. Every call
// throws Error(plugin) naming the plugin and the call on failure, or
// Error(peer_lost) when a peer died or stopped answering.
//
// Calls are collective over the communicator (send/recv pair two ranks) and
// come one at a time per world; buffers live on the desc's device and
// `queue` is that device's (NULL on the CPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.hpp"
#include "core/plugin_loader.hpp"
#include "plugins/api/llmk_comm.h"

namespace llmk {

// What a communicator has moved, for benchmarks and logs.
struct CommStats {
  uint64_t calls = 0;
  uint64_t bytes = 0;    // payload bytes this rank contributed
  double seconds = 0;    // wall time inside calls (waiting for peers included)
};

// A desc for host buffers (device CPU, the plugin picking any device index).
// `options` must outlive the desc's use.
inline llmk_comm_desc host_comm_desc(double timeout_s, const char* options = "{}") {
  llmk_comm_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.device = LLMK_DEVICE_CPU;
  desc.device_index = -1;
  desc.timeout_s = timeout_s;
  desc.options = options;
  return desc;
}

class Communicator {
 public:
  // The world, from `plugin` (a comm plugin, e.g. comm.mpi). Throws
  // Error(plugin) with the plugin's reason when it refuses the desc.
  static std::shared_ptr<Communicator> world(Plugin plugin, const llmk_comm_desc& desc);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int32_t rank() const { return rank_; }
  int32_t size() const { return size_; }
  const PluginInfo& info() const { return plugin_.info(); }
  const CommStats& stats() const { return stats_; }

  // Ranks passing the same color form one communicator, ranked by key.
  std::shared_ptr<Communicator> split(int32_t color, int32_t key);

  void all_reduce(const void* send, void* recv, size_t count, DType dtype, void* queue = nullptr);
  void all_reduce(float* data, size_t count) { all_reduce(data, data, count, DType::f32); }
  void all_gather(const void* send, void* recv, size_t count, DType dtype, void* queue = nullptr);
  void broadcast(void* data, size_t count, DType dtype, int32_t root, void* queue = nullptr);
  void send(const void* data, size_t count, DType dtype, int32_t peer, void* queue = nullptr);
  void recv(void* data, size_t count, DType dtype, int32_t peer, void* queue = nullptr);
  void group_start();
  void group_end(void* queue = nullptr);
  void barrier(void* queue = nullptr);
  // Ends every process of the job with `code`.
  [[noreturn]] void abort(int32_t code);

 private:
  Communicator(Plugin plugin, void* self);
  void check(int status, const llmk_error& err, const char* call, size_t bytes, double seconds);

  Plugin plugin_;
  void* self_ = nullptr;
  int32_t rank_ = 0, size_ = 1;
  CommStats stats_;
};

}  // namespace llmk
