// Prefill/decode disaggregation between processes: a prefill replica's
// KvTransferServer hands the K/V its engine left in its KvHandoffBox
// (core/kv_handoff.hpp) to the decode replica whose KvTransferClient asks
// for it by the router's bootstrap room.
//
// Wire (ZeroMQ; the server a ROUTER bound on the bootstrap port, each
// client a DEALER per prefill replica it fetches from):
//   fetch:  [room]
//   answer: [room] [meta: JSON] [block 0] [block 1] ...
// meta is {"layout", "prompt_tokens", "first_token", "block_size",
// "num_blocks"} for a handoff, {"error": "..."} when the prefill failed, was
// cancelled, or did not end within the server's wait. A fetch may come
// before its prefill ends (the router sends both requests at once): the
// server answers when the handoff is there.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/kv_handoff.hpp"

namespace llmk::ipc {

class KvTransferServer {
 public:
  // Binds tcp://HOST:PORT (host "0.0.0.0" or "" binds every interface):
  // throws Error(invalid_config) naming disaggregation.bootstrap_port when
  // it cannot. A fetch waits up to `wait` for its handoff.
  KvTransferServer(std::shared_ptr<KvHandoffBox> box, const std::string& host, uint32_t port,
                   std::chrono::milliseconds wait);
  ~KvTransferServer();
  KvTransferServer(const KvTransferServer&) = delete;
  KvTransferServer& operator=(const KvTransferServer&) = delete;

  std::string endpoint() const { return endpoint_; }
  uint64_t num_sent() const;      // handoffs sent
  uint64_t num_failed() const;    // fetches answered with an error

 private:
  struct State;
  std::unique_ptr<State> state_;
  std::string endpoint_;
};

class KvTransferClient {
 public:
  using Callback = std::function<void(KvHandoffResult)>;
  // A fetch not answered within `timeout` ends with an error.
  explicit KvTransferClient(std::chrono::milliseconds timeout);
  ~KvTransferClient();  // ends every fetch still waiting with an error
  KvTransferClient(const KvTransferClient&) = delete;
  KvTransferClient& operator=(const KvTransferClient&) = delete;

  // Asks tcp://host:port for `room`; `done` runs once, on the client's
  // thread, with the handoff or the reason there is none. Never blocks.
  void fetch(const std::string& host, uint32_t port, const std::string& room, Callback done);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace llmk::ipc
