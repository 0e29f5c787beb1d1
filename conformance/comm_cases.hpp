// Pieces of the communicator suite (comm_suite.cpp): a comm plugin's object
// called through its C table (so that a case sees the status a call
// returns, not an exception made of it), the case runner, the element
// types' storage, and the cases that need no peer data: the plugin's
// capabilities and table, its descs, and bad arguments.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "conformance/device.hpp"
#include "conformance/suite.hpp"
#include "core/plugin_loader.hpp"
#include "plugins/api/llmk_comm.h"

namespace llmk::conformance::commtest {

// A case's verdict with its reason (any other exception fails it too).
class Failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A communicator of the plugin: the world of the launch, or a part split
// from it. Buffers live on `device`; calls go on its stream.
class Comm {
 public:
  Comm() = default;
  // Joins the world (collective over every rank of the launch).
  static Comm world(const Plugin& plugin, Device& device);
  Comm(Comm&& other) noexcept;
  Comm& operator=(Comm&& other) noexcept;
  ~Comm();

  // Collective over this communicator: ranks with the same color, ranked by key.
  Comm split(int32_t color, int32_t key);

  const llmk_comm_api& api() const { return plugin_.comm(); }
  void* self() const { return self_; }
  void* queue() const { return device_->stream(); }
  Device& device() const { return *device_; }
  int32_t rank() const { return rank_; }
  int32_t size() const { return size_; }
  // A cleared error for the next call.
  llmk_error* err() {
    err_ = llmk_error{};
    return &err_;
  }
  // A call's status: Failure naming `call` and the plugin's message unless
  // LLMK_OK; then waits for the device's stream.
  void ok(int status, const char* call);
  // The message of the last call.
  std::string message() const { return err_.message; }

 private:
  Comm(Plugin plugin, Device& device, void* self);
  Plugin plugin_;
  Device* device_ = nullptr;
  void* self_ = nullptr;
  int32_t rank_ = 0, size_ = 1;
  llmk_error err_{};
};

// Runs cases into a SuiteResult, in order, catching what they throw.
class Cases {
 public:
  explicit Cases(SuiteResult& result) : result_(result) {}
  // fn returns the case's error under `measure`; it passes within `tolerance`.
  void run(const std::string& name, const std::string& measure, double tolerance, const std::function<double()>& fn);
  // fn throws when the case fails.
  void exact(const std::string& name, const std::function<void()>& fn);
  // Counted as unsupported (with why) instead of run when `unsupported`.
  void exact_or_unsupported(const std::string& name, bool unsupported, const std::string& why,
                            const std::function<void()>& fn);

 private:
  SuiteResult& result_;
};

// Element storage of the dtypes the suite moves (f32, bf16, f16, i32, u8).
size_t element_bytes(uint32_t dtype);
void store(uint32_t dtype, float v, void* base, size_t i);
double load(uint32_t dtype, const void* base, size_t i);
// v as the dtype holds it (round to nearest even).
double rounded(uint32_t dtype, float v);

// The plugin's capabilities JSON, its table, and descs it must refuse;
// errors in `result` when the table is unusable.
void api_cases(const Plugin& plugin, Device& device, Cases& cases);
// Bad arguments each rank refuses on its own (so the ranks stay in step):
// an error status, never a crash, with a message naming what is wrong;
// then the communicator still sums.
void bad_argument_cases(Comm& comm, Cases& cases);

}  // namespace llmk::conformance::commtest
