#include "ipc/kv_transfer.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>
#include <zmq_addon.hpp>

#include "core/error.hpp"

namespace llmk::ipc {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string frame_text(const zmq::message_t& m) { return std::string(static_cast<const char*>(m.data()), m.size()); }

// [meta] [block...] of a handoff or an error (the room frame goes first).
std::vector<zmq::message_t> encode(const KvHandoffResult& r) {
  std::vector<zmq::message_t> out;
  if (!r.handoff) {
    out.emplace_back(json{{"error", r.error}}.dump());
    return out;
  }
  const KvHandoff& h = *r.handoff;
  const json meta = {{"layout", h.layout},
                     {"prompt_tokens", h.prompt_tokens},
                     {"first_token", h.first_token},
                     {"block_size", h.block_size},
                     {"num_blocks", h.blocks.size()}};
  out.emplace_back(meta.dump());
  for (const auto& b : h.blocks) out.emplace_back(b.data(), b.size());
  return out;
}

KvHandoffResult decode(std::vector<zmq::message_t>& frames, size_t first, const std::string& from) {
  KvHandoffResult r;
  try {
    if (frames.size() <= first) throw std::runtime_error("no meta frame");
    const json meta = json::parse(frame_text(frames[first]));
    if (meta.contains("error")) {
      r.error = "the prefill replica at " + from + " answered: " + meta["error"].get<std::string>();
      return r;
    }
    auto h = std::make_shared<KvHandoff>();
    h->layout = meta.at("layout").get<std::string>();
    h->prompt_tokens = meta.at("prompt_tokens").get<std::vector<int32_t>>();
    h->first_token = meta.at("first_token").get<int32_t>();
    h->block_size = meta.at("block_size").get<int32_t>();
    const auto num_blocks = meta.at("num_blocks").get<size_t>();
    if (frames.size() != first + 1 + num_blocks)
      throw std::runtime_error(std::to_string(frames.size() - first - 1) + " block frames for " +
                               std::to_string(num_blocks) + " blocks");
    for (size_t b = 0; b < num_blocks; ++b) {
      const auto& f = frames[first + 1 + b];
      const auto* p = static_cast<const uint8_t*>(f.data());
      h->blocks.emplace_back(p, p + f.size());
    }
    r.handoff = std::move(h);
  } catch (const std::exception& e) {
    r.error = std::string("a malformed K/V handoff from ") + from + ": " + e.what();
  }
  return r;
}

bool any_host(const std::string& host) { return host.empty() || host == "0.0.0.0" || host == "*"; }

std::string bind_endpoint(const std::string& host, uint32_t port) {
  return "tcp://" + (any_host(host) ? std::string("*") : host) + ":" + std::to_string(port);
}

std::string connect_endpoint(const std::string& host, uint32_t port) {
  return "tcp://" + (any_host(host) ? std::string("127.0.0.1") : host) + ":" + std::to_string(port);
}

}  // namespace

// ---- server (prefill replica) ----

struct KvTransferServer::State {
  std::shared_ptr<KvHandoffBox> box;
  std::chrono::milliseconds wait{};
  zmq::context_t context{1};
  zmq::socket_t router{context, zmq::socket_type::router};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> sent{0}, failed{0};
  std::thread thread;

  struct Fetch {
    zmq::message_t identity;
    std::string room;
    Clock::time_point deadline;
  };
  std::vector<Fetch> fetches;

  void answer(Fetch& f, const KvHandoffResult& r) {
    std::vector<zmq::message_t> frames;
    frames.push_back(std::move(f.identity));
    frames.emplace_back(f.room);
    for (auto& m : encode(r)) frames.push_back(std::move(m));
    try {
      zmq::send_multipart(router, frames, zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      spdlog::warn("kv transfer: answering room {} failed: {}", f.room, e.what());
    }
    (r.handoff ? sent : failed) += 1;
  }

  void run() {
    while (!stop.load()) {
      zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(fetches.empty() ? 50 : 1));
      for (;;) {
        std::vector<zmq::message_t> frames;
        if (!zmq::recv_multipart(router, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
        if (frames.size() != 2) continue;  // not a fetch: nothing to answer
        fetches.push_back({std::move(frames[0]), frame_text(frames[1]), Clock::now() + wait});
      }
      const auto now = Clock::now();
      for (size_t i = 0; i < fetches.size();) {
        Fetch& f = fetches[i];
        std::optional<KvHandoffResult> r = box->take(f.room);
        if (!r && now >= f.deadline)
          r = KvHandoffResult{nullptr, "no prefill for room " + f.room + " ended within the transfer timeout"};
        if (!r) {
          ++i;
          continue;
        }
        answer(f, *r);
        fetches.erase(fetches.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
  }
};

KvTransferServer::KvTransferServer(std::shared_ptr<KvHandoffBox> box, const std::string& host, uint32_t port,
                                   std::chrono::milliseconds wait)
    : state_(std::make_unique<State>()) {
  state_->box = std::move(box);
  state_->wait = wait;
  state_->router.set(zmq::sockopt::linger, 0);
  state_->router.set(zmq::sockopt::sndhwm, 0);  // a handoff is never dropped for a slow decode replica
  const std::string at = bind_endpoint(host, port);
  try {
    state_->router.bind(at);
  } catch (const zmq::error_t& e) {
    throw Error(ErrorCode::invalid_config,
                "disaggregation.bootstrap_port: cannot bind the K/V transfer endpoint " + at + ": " + e.what());
  }
  endpoint_ = state_->router.get(zmq::sockopt::last_endpoint);
  state_->thread = std::thread([s = state_.get()] { s->run(); });
}

KvTransferServer::~KvTransferServer() {
  state_->stop = true;
  if (state_->thread.joinable()) state_->thread.join();
}

uint64_t KvTransferServer::num_sent() const { return state_->sent.load(); }
uint64_t KvTransferServer::num_failed() const { return state_->failed.load(); }

// ---- client (decode replica) ----

struct KvTransferClient::State {
  std::chrono::milliseconds timeout{};
  zmq::context_t context{1};
  std::thread thread;
  std::atomic<bool> stop{false};

  struct Ask {
    std::string endpoint, room;
    Callback done;
  };
  std::mutex mutex;
  std::vector<Ask> asks;  // from fetch(), for the thread

  // The thread's own: a DEALER per prefill replica, and what waits on each.
  std::map<std::string, zmq::socket_t> dealers;
  struct Waiting {
    Callback done;
    Clock::time_point deadline;
  };
  std::map<std::pair<std::string, std::string>, Waiting> waiting;  // (endpoint, room)

  zmq::socket_t& dealer(const std::string& endpoint) {
    auto it = dealers.find(endpoint);
    if (it != dealers.end()) return it->second;
    zmq::socket_t s(context, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::rcvhwm, 0);
    s.connect(endpoint);
    return dealers.emplace(endpoint, std::move(s)).first->second;
  }

  void start(Ask& a) {
    try {
      dealer(a.endpoint).send(zmq::buffer(a.room), zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      a.done(KvHandoffResult{nullptr, "cannot ask " + a.endpoint + " for its K/V: " + e.what()});
      return;
    }
    waiting[{a.endpoint, a.room}] = Waiting{std::move(a.done), Clock::now() + timeout};
  }

  void receive() {
    std::vector<zmq::pollitem_t> items;
    std::vector<const std::string*> names;
    for (auto& [endpoint, socket] : dealers) {
      items.push_back({socket.handle(), 0, ZMQ_POLLIN, 0});
      names.push_back(&endpoint);
    }
    const auto nap = std::chrono::milliseconds(waiting.empty() ? 5 : 1);
    if (items.empty()) {
      std::this_thread::sleep_for(nap);
      return;
    }
    zmq::poll(items.data(), items.size(), nap);
    size_t i = 0;
    for (auto& [endpoint, socket] : dealers) {
      if ((items[i++].revents & ZMQ_POLLIN) == 0) continue;
      for (;;) {
        std::vector<zmq::message_t> frames;
        if (!zmq::recv_multipart(socket, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
        if (frames.empty()) continue;
        auto it = waiting.find({endpoint, frame_text(frames[0])});
        if (it == waiting.end()) continue;  // given up already
        Callback done = std::move(it->second.done);
        waiting.erase(it);
        done(decode(frames, 1, endpoint));
      }
    }
  }

  void expire(bool all) {
    const auto now = Clock::now();
    for (auto it = waiting.begin(); it != waiting.end();) {
      if (!all && now < it->second.deadline) {
        ++it;
        continue;
      }
      Callback done = std::move(it->second.done);
      const std::string why = all ? "the decode replica is stopping"
                                  : "no K/V from " + it->first.first + " for room " + it->first.second + " within " +
                                        std::to_string(timeout.count()) + " ms";
      it = waiting.erase(it);
      done(KvHandoffResult{nullptr, why});
    }
  }

  void run() {
    while (!stop.load()) {
      std::vector<Ask> batch;
      {
        std::lock_guard lock(mutex);
        batch.swap(asks);
      }
      for (Ask& a : batch) start(a);
      receive();
      expire(false);
    }
    std::vector<Ask> batch;
    {
      std::lock_guard lock(mutex);
      batch.swap(asks);
    }
    for (Ask& a : batch) a.done(KvHandoffResult{nullptr, "the decode replica is stopping"});
    expire(true);
  }
};

KvTransferClient::KvTransferClient(std::chrono::milliseconds timeout) : state_(std::make_unique<State>()) {
  state_->timeout = timeout;
  state_->thread = std::thread([s = state_.get()] { s->run(); });
}

KvTransferClient::~KvTransferClient() {
  state_->stop = true;
  if (state_->thread.joinable()) state_->thread.join();
}

void KvTransferClient::fetch(const std::string& host, uint32_t port, const std::string& room, Callback done) {
  std::lock_guard lock(state_->mutex);
  state_->asks.push_back({connect_endpoint(host, port), room, std::move(done)});
}

}  // namespace llmk::ipc
