#include "core/communicator.hpp"

#include <chrono>
#include <cstdlib>
#include <string>

#include "core/error.hpp"

namespace llmk {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

std::shared_ptr<Communicator> Communicator::world(Plugin plugin, const llmk_comm_desc& desc) {
  const llmk_comm_api& api = plugin.comm();
  char why[512] = {0};
  if (api.supports(&desc, why, sizeof(why)) == 0)
    throw Error(ErrorCode::plugin, "comm plugin '" + plugin.info().name + "' refuses this job: " + why);
  llmk_error err{};
  void* self = api.create(&desc, &err);
  if (self == nullptr)
    throw Error(err.status == LLMK_ERR_PEER_LOST ? ErrorCode::peer_lost : ErrorCode::plugin,
                "comm plugin '" + plugin.info().name + "' could not join the world: " + err.message);
  return std::shared_ptr<Communicator>(new Communicator(std::move(plugin), self));
}

Communicator::Communicator(Plugin plugin, void* self) : plugin_(std::move(plugin)), self_(self) {
  llmk_error err{};
  const int status = plugin_.comm().rank(self_, &rank_, &size_, &err);
  if (status != LLMK_OK) {
    plugin_.comm().destroy(self_);
    throw Error(ErrorCode::plugin, "comm plugin '" + plugin_.info().name + "': rank failed: " + err.message);
  }
}

Communicator::~Communicator() {
  if (self_ != nullptr) plugin_.comm().destroy(self_);
}

void Communicator::check(int status, const llmk_error& err, const char* call, size_t bytes, double seconds) {
  stats_.calls += 1;
  stats_.bytes += bytes;
  stats_.seconds += seconds;
  if (status == LLMK_OK) return;
  const std::string text = "rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ", " +
                           plugin_.info().name + " " + call + ": " + err.message;
  throw Error(status == LLMK_ERR_PEER_LOST ? ErrorCode::peer_lost : ErrorCode::plugin, text);
}

std::shared_ptr<Communicator> Communicator::split(int32_t color, int32_t key) {
  llmk_error err{};
  void* out = nullptr;
  const auto t = Clock::now();
  const int status = plugin_.comm().split(self_, color, key, &out, &err);
  check(status, err, "split", 0, since(t));
  return std::shared_ptr<Communicator>(new Communicator(plugin_, out));
}

void Communicator::all_reduce(const void* send, void* recv, size_t count, DType dtype, void* queue) {
  llmk_error err{};
  const auto t = Clock::now();
  const int status = plugin_.comm().all_reduce(self_, send, recv, count, static_cast<uint32_t>(dtype),
                                               LLMK_REDUCE_SUM, queue, &err);
  check(status, err, "all_reduce", dtype_bytes(dtype, static_cast<int64_t>(count)), since(t));
}

void Communicator::all_gather(const void* send, void* recv, size_t count, DType dtype, void* queue) {
  llmk_error err{};
  const auto t = Clock::now();
  const int status = plugin_.comm().all_gather(self_, send, recv, count, static_cast<uint32_t>(dtype), queue, &err);
  check(status, err, "all_gather", dtype_bytes(dtype, static_cast<int64_t>(count)), since(t));
}

void Communicator::broadcast(void* data, size_t count, DType dtype, int32_t root, void* queue) {
  llmk_error err{};
  const auto t = Clock::now();
  const int status = plugin_.comm().broadcast(self_, data, count, static_cast<uint32_t>(dtype), root, queue, &err);
  check(status, err, "broadcast", rank_ == root ? dtype_bytes(dtype, static_cast<int64_t>(count)) : 0, since(t));
}

void Communicator::send(const void* data, size_t count, DType dtype, int32_t peer, void* queue) {
  llmk_error err{};
  const auto t = Clock::now();
  const int status = plugin_.comm().send(self_, data, count, static_cast<uint32_t>(dtype), peer, queue, &err);
  check(status, err, "send", dtype_bytes(dtype, static_cast<int64_t>(count)), since(t));
}

void Communicator::recv(void* data, size_t count, DType dtype, int32_t peer, void* queue) {
  llmk_error err{};
  const auto t = Clock::now();
  const int status = plugin_.comm().recv(self_, data, count, static_cast<uint32_t>(dtype), peer, queue, &err);
  check(status, err, "recv", 0, since(t));
}

void Communicator::group_start() {
  llmk_error err{};
  check(plugin_.comm().group_start(self_, &err), err, "group_start", 0, 0);
}

void Communicator::group_end(void* queue) {
  llmk_error err{};
  const auto t = Clock::now();
  const int status = plugin_.comm().group_end(self_, queue, &err);
  check(status, err, "group_end", 0, since(t));
}

void Communicator::barrier(void* queue) {
  llmk_error err{};
  const auto t = Clock::now();
  const int status = plugin_.comm().barrier(self_, queue, &err);
  check(status, err, "barrier", 0, since(t));
}

void Communicator::abort(int32_t code) {
  plugin_.comm().abort(self_, code);
  std::_Exit(code);
}

}  // namespace llmk
