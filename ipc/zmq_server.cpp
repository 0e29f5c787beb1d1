#include "ipc/zmq_server.hpp"

#include <spdlog/spdlog.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <map>
#include <unordered_map>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "core/error.hpp"
#include "ipc/broker_link.hpp"
#include "ipc/embeddings.hpp"
#include "ipc/ipc_socket_file.hpp"
#include "ipc/errors.hpp"
#include "ipc/limits.hpp"
#include "ipc/mailbox.hpp"
#include "ipc/zmq_curve.hpp"
#include "ipc/zmq_protocol.hpp"

namespace llmk::ipc {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// What other threads hand the socket thread: a request's event, or (with
// no internal id) a finished embed's reply for a peer.
struct Posted {
  std::string internal_id;
  RequestEvent event;
  std::string identity;  // embed replies
  json reply;
};

// A peer's routing envelope (its identity frame; through a broker, the
// client's) as one map key: each frame length-prefixed.
std::string pack_envelope(const std::vector<zmq::message_t>& frames, size_t num_frames) {
  std::string key;
  for (size_t i = 0; i < num_frames; ++i) {
    const uint32_t n = static_cast<uint32_t>(frames[i].size());
    key.append(reinterpret_cast<const char*>(&n), sizeof n);
    key.append(frames[i].data<char>(), frames[i].size());
  }
  return key;
}

// Sends the envelope's frames, each with more to follow; false when the
// first is unroutable (EHOSTUNREACH under ZMQ_ROUTER_MANDATORY) or would block.
bool send_envelope(zmq::socket_t& socket, const std::string& key) {
  size_t pos = 0;
  bool first = true;
  while (pos + sizeof(uint32_t) <= key.size()) {
    uint32_t n = 0;
    std::memcpy(&n, key.data() + pos, sizeof n);
    pos += sizeof n;
    const auto flags = zmq::send_flags::sndmore | (first ? zmq::send_flags::dontwait : zmq::send_flags::none);
    if (!socket.send(zmq::buffer(key.data() + pos, n), flags)) return false;
    pos += n;
    first = false;
  }
  return true;
}

}  // namespace

// Embeddings are computed off the socket thread: Backend::embed blocks for
// a prefill per input, and the socket thread must go on serving every other
// peer meanwhile. One worker takes the embeds in arrival order (the engine
// runs them one at a time between its steps anyway) and posts each reply to
// the mailbox; a peer gone by then just misses it.
class ZmqServer::EmbedWorker {
 public:
  struct Job {
    std::string identity;
    std::string client_id;
    EmbeddingsRequest request;
  };

  EmbedWorker(Backend& backend, Metrics& metrics, std::shared_ptr<Mailbox<Posted>> mailbox)
      : backend_(backend), metrics_(metrics), mailbox_(std::move(mailbox)), thread_([this] { run(); }) {}
  ~EmbedWorker() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  void push(Job job) {
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    wake_.notify_all();
  }

 private:
  void run() {
    for (;;) {
      Job job;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (stopping_) return;  // jobs not begun are dropped with their peers' requests
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      Posted posted;
      posted.identity = job.identity;
      try {
        std::vector<std::vector<float>> vectors;
        int64_t prompt_tokens = 0;
        for (const EmbeddingInput& input : job.request.inputs) {
          const std::vector<int32_t> ids =
              input.token_ids.empty() ? backend_.embedding_ids(input.text) : input.token_ids;
          prompt_tokens += static_cast<int64_t>(ids.size());
          vectors.push_back(backend_.embed(ids, job.request.params));
        }
        metrics_.on_embeddings(Frontend::zmq, vectors.size(), prompt_tokens);
        posted.reply = embedding_message(job.client_id, vectors, job.request.base64, backend_.model_info().name,
                                         static_cast<int32_t>(prompt_tokens));
      } catch (const std::exception& e) {
        const ErrorReply error = error_reply(e);
        metrics_.on_rejected(Frontend::zmq, error.code);
        posted.reply = to_zmq_json(error, job.client_id);
      }
      mailbox_->post(std::move(posted));
    }
  }

  Backend& backend_;
  Metrics& metrics_;
  std::shared_ptr<Mailbox<Posted>> mailbox_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the rest is built
};

// Everything the socket thread owns. The mailbox is shared with backend
// callbacks, which may outlive the server.
struct ZmqServer::State {
  struct LiveRequest {
    std::string identity;
    std::string client_id;
    bool stream = true;
    bool orphaned = false;  // peer gone or request failed: events are dropped
    std::map<int32_t, std::string> texts;  // by sample index
    std::map<int32_t, std::vector<int32_t>> token_ids;
  };
  struct Peer {
    bool delimiter = false;  // the peer frames messages as [empty][payload]
    std::map<std::string, std::string> requests;  // client id -> internal id
    Clock::time_point last_sent = Clock::now();
    int pending_embeds = 0;  // embeds given to the worker, not yet answered
  };

  zmq::context_t context{1};
  zmq::socket_t router{context, zmq::socket_type::router};  // bound at options.endpoint (no broker)
  IpcSocketFile router_file;                                // an ipc:// endpoint's file, removed at shutdown
  std::unique_ptr<BrokerLink> link;                         // a broker's worker: its DEALER instead
  std::unique_ptr<ZapHandler> zap;          // CURVE only; closed before the context
  std::unique_ptr<Deadlines> deadlines;
  std::shared_ptr<Mailbox<Posted>> mailbox = std::make_shared<Mailbox<Posted>>();
  std::unordered_map<std::string, LiveRequest> live;  // by internal id
  std::unordered_map<std::string, Peer> peers;        // by identity
  uint64_t next_id = 0;
  std::unique_ptr<EmbedWorker> embedder;  // started with the first embed
};



ZmqServer::ZmqServer(Backend& backend, Metrics& metrics, ZmqServerOptions options)
    : backend_(backend), metrics_(metrics), options_(std::move(options)), state_(std::make_unique<State>()) {
  auto& router = state_->router;
  router.set(zmq::sockopt::router_mandatory, 1);
  router.set(zmq::sockopt::linger, 0);
  router.set(zmq::sockopt::sndhwm, 1 << 20);
  router.set(zmq::sockopt::rcvhwm, 1 << 20);
  router.set(zmq::sockopt::heartbeat_ivl, options_.heartbeat_interval_ms);
  router.set(zmq::sockopt::heartbeat_timeout, options_.heartbeat_timeout_ms);
  state_->deadlines = std::make_unique<Deadlines>(backend_);
  if (!options_.curve_secret_key.empty()) {
    if (!options_.broker.empty())
      throw Error(ErrorCode::invalid_config, "server.auth.curve_secret_key_file: CURVE secures server.zmq, not a "
                                             "broker's worker (server.zmq_broker): the broker faces the clients");
    state_->zap = std::make_unique<ZapHandler>(state_->context, options_.curve_allowed_keys_file);
    make_curve_server(router, options_.curve_secret_key);
  }
  if (!options_.broker.empty()) {
    state_->link = std::make_unique<BrokerLink>(state_->context, options_.broker, options_.replica_name,
                                                options_.heartbeat_interval_ms, options_.heartbeat_timeout_ms);
    endpoint_ = options_.broker;
    thread_ = std::thread([this] { run(); });
    return;
  }
  try {
    router.bind(options_.endpoint);
  } catch (const zmq::error_t& e) {
    throw Error(ErrorCode::invalid_config,
                "cannot bind the ZeroMQ endpoint " + options_.endpoint + " (server.zmq): " + e.what());
  }
  endpoint_ = router.get(zmq::sockopt::last_endpoint);
  state_->router_file = IpcSocketFile(endpoint_);
  thread_ = std::thread([this] { run(); });
}

ZmqServer::~ZmqServer() { stop(); }

void ZmqServer::start_draining() { draining_ = true; }

void ZmqServer::cancel_all() {
  cancel_all_ = true;
  state_->mailbox->wake();
}

void ZmqServer::stop() {
  if (!thread_.joinable()) return;
  stopping_ = true;
  state_->mailbox->wake();
  thread_.join();
}

void ZmqServer::run() {
  State& st = *state_;
  const auto mailbox = st.mailbox;
  // The socket messages come and go on: the bound ROUTER, or the broker link's DEALER.
  const auto socket = [&]() -> zmq::socket_t& { return st.link ? st.link->socket() : st.router; };

  // Sends one message to a peer; false when the peer is gone (unroutable
  // under ZMQ_ROUTER_MANDATORY, or so far behind that its queue is full).
  const auto send = [&](const std::string& identity, const json& msg) -> bool {
    auto peer = st.peers.find(identity);
    const bool delimiter = peer != st.peers.end() && peer->second.delimiter;
    const std::string payload = dump_json(msg);
    try {
      if (!send_envelope(socket(), identity)) return false;
      if (delimiter) socket().send(zmq::message_t(), zmq::send_flags::sndmore);
      socket().send(zmq::buffer(payload), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      if (e.num() == EHOSTUNREACH) return false;
      throw;
    }
    if (peer != st.peers.end()) peer->second.last_sent = Clock::now();
    return true;
  };

  // A vanished peer: cancel its requests (freeing their KV) and forget it.
  const auto drop_peer = [&](const std::string& identity) {
    auto peer = st.peers.find(identity);
    if (peer == st.peers.end()) return;
    for (const auto& [client_id, internal_id] : peer->second.requests) {
      st.live[internal_id].orphaned = true;
      backend_.cancel(internal_id);
    }
    if (!peer->second.requests.empty()) {
      spdlog::info("zmq: peer gone, cancelled {} request(s)", peer->second.requests.size());
    }
    st.peers.erase(peer);
  };

  const auto reply_error = [&](const std::string& identity, const ErrorReply& error, const json& id) {
    if (!send(identity, to_zmq_json(error, id)) && st.peers.count(identity)) drop_peer(identity);
  };

  const auto handle_message = [&](const std::string& identity, bool delimiter, std::string_view payload) {
    st.peers[identity].delimiter = delimiter;
    if (payload.size() > options_.max_message_bytes) {
      metrics_.on_rejected(Frontend::zmq, "payload_too_large");
      return reply_error(identity,
                         error_reply(ProtocolFailure::payload_too_large,
                                     "message of " + std::to_string(payload.size()) +
                                         " bytes exceeds server.max_body_bytes = " +
                                         std::to_string(options_.max_message_bytes)),
                         nullptr);
    }
    ClientMessage msg;
    const ModelInfo model = backend_.model_info();
    try {
      msg = parse_client_message(payload, model.max_context, model.vocab_size);
    } catch (const std::exception& e) {
      const ErrorReply error = error_reply(e);
      metrics_.on_rejected(Frontend::zmq, error.code);
      return reply_error(identity, error, error_reply_id(payload));
    }
    State::Peer& peer = st.peers[identity];
    switch (msg.type) {
      case ClientMessageType::submit: {
        if (draining_) {
          metrics_.on_rejected(Frontend::zmq, "shutting_down");
          return reply_error(identity, error_reply(ProtocolFailure::shutting_down, "the server is shutting down"),
                             msg.id);
        }
        if (peer.requests.count(msg.id)) {
          metrics_.on_rejected(Frontend::zmq, "invalid_argument");
          return reply_error(identity,
                             error_reply(ErrorCode::invalid_argument,
                                         "request id '" + msg.id + "' is already live on this connection", "id"),
                             msg.id);
        }
        const std::string internal_id = "zmq-" + std::to_string(++st.next_id);
        State::LiveRequest& live = st.live[internal_id];
        live.identity = identity;
        live.client_id = msg.id;
        live.stream = msg.stream;
        peer.requests[msg.id] = internal_id;
        num_live_ = st.live.size();
        msg.request.id = internal_id;
        const double timeout_s = msg.timeout_s > 0 ? msg.timeout_s : options_.request_timeout_s;
        backend_.submit(std::move(msg.request), st.deadlines->watch(internal_id, timeout_s,
                                                                    [mailbox, internal_id](const RequestEvent& ev) {
                                                                      mailbox->post({internal_id, ev});
                                                                    }));
        return;
      }
      case ClientMessageType::cancel: {
        auto it = peer.requests.find(msg.id);
        if (it == peer.requests.end()) {
          return reply_error(
              identity, error_reply(ErrorCode::not_found, "no live request with id '" + msg.id + "'", "id"), msg.id);
        }
        backend_.cancel(it->second);  // its final event (finish_reason cancelled) is the reply
        return;
      }
      case ClientMessageType::health:
        if (!send(identity, health_message(msg.ref, draining_))) drop_peer(identity);
        return;
      case ClientMessageType::stats:
        if (!send(identity, stats_message(msg.ref, backend_.stats()))) drop_peer(identity);
        return;
      case ClientMessageType::ping:
        if (!send(identity, pong_message(msg.ref))) drop_peer(identity);
        return;
      case ClientMessageType::bye:
        drop_peer(identity);
        return;
      case ClientMessageType::embed: {
        if (draining_) {
          metrics_.on_rejected(Frontend::zmq, "shutting_down");
          return reply_error(identity, error_reply(ProtocolFailure::shutting_down, "the server is shutting down"),
                             msg.id);
        }
        EmbedWorker::Job job{identity, msg.id, {}};
        try {
          job.request = parse_embeddings_fields(msg.embed_fields, model, backend_.default_pooling());
        } catch (const std::exception& e) {
          const ErrorReply error = error_reply(e);
          metrics_.on_rejected(Frontend::zmq, error.code);
          return reply_error(identity, error, msg.id);
        }
        if (!st.embedder) st.embedder = std::make_unique<EmbedWorker>(backend_, metrics_, mailbox);
        st.embedder->push(std::move(job));
        ++peer.pending_embeds;
        return;
      }
    }
  };

  const auto handle_event = [&](const std::string& internal_id, const RequestEvent& ev) {
    auto it = st.live.find(internal_id);
    if (it == st.live.end()) return;
    State::LiveRequest& live = it->second;
    if (ev.finished) metrics_.on_finished(Frontend::zmq, ev);
    if (!live.orphaned) {
      bool sent = true;
      if (ev.finish_reason == FinishReason::error) {
        sent = send(live.identity, to_zmq_json(error_reply(ev.error_code, ev.error, ev.error_field), live.client_id));
        live.orphaned = true;  // the error ends the request for the client
        if (!ev.request_done) backend_.cancel(internal_id);
        st.peers[live.identity].requests.erase(live.client_id);
      } else {
        std::string& text = live.texts[ev.index];
        std::vector<int32_t>& ids = live.token_ids[ev.index];
        text += ev.text_delta;
        ids.insert(ids.end(), ev.token_ids.begin(), ev.token_ids.end());
        if (live.stream && (!ev.token_ids.empty() || !ev.text_delta.empty())) {
          sent = send(live.identity, token_message(live.client_id, ev));
        }
        if (sent && ev.finished) sent = send(live.identity, final_message(live.client_id, ev, text, ids));
      }
      if (!sent) drop_peer(live.identity);
    }
    if (ev.request_done) {
      auto peer = st.peers.find(live.identity);
      if (peer != st.peers.end()) {
        auto r = peer->second.requests.find(live.client_id);
        if (r != peer->second.requests.end() && r->second == internal_id) peer->second.requests.erase(r);
      }
      st.live.erase(it);
      num_live_ = st.live.size();
    }
  };

  const auto handle_incoming = [&] {
    for (int budget = 0; budget < 256; ++budget) {
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(socket(), std::back_inserter(frames), zmq::recv_flags::dontwait)) return;
      if (st.link) {
        st.link->on_heard();
        if (frames[0].size() == 0) {  // the broker's own message
          if (frames.size() == 2) st.link->on_control(frames[1].to_string_view());
          continue;
        }
      }
      if (frames.size() < 2) continue;  // nothing after the envelope: nobody to answer
      // frames[0] is the client's identity (its ROUTER's, or the broker's ROUTER's).
      const std::string identity = pack_envelope(frames, 1);
      const bool delimiter = frames.size() >= 2 && frames[1].size() == 0;
      if (frames.size() == 2 || (frames.size() == 3 && delimiter)) {
        try {
          handle_message(identity, delimiter, frames.back().to_string_view());
        } catch (const zmq::error_t&) {
          throw;
        } catch (const std::exception& e) {  // a backend failure: the client still gets an answer
          spdlog::error("zmq: {}", e.what());
          if (!send(identity, to_zmq_json(error_reply(e), error_reply_id(frames.back().to_string_view())))) {
            drop_peer(identity);
          }
        }
        continue;
      }
      st.peers[identity].delimiter = delimiter;
      metrics_.on_rejected(Frontend::zmq, "malformed");
      const auto error = error_reply(
          ProtocolFailure::malformed,
          "a message must be one JSON frame (optionally after one empty delimiter frame), got " +
              std::to_string(frames.size() - 1) + " frames");
      if (!send(identity, to_zmq_json(error, nullptr))) drop_peer(identity);
    }
  };

  const auto send_keepalives = [&] {
    const auto now = Clock::now();
    std::vector<std::string> gone;
    // Peers without live requests are forgotten (they come back with their next message).
    std::erase_if(st.peers,
                  [](const auto& entry) { return entry.second.requests.empty() && entry.second.pending_embeds == 0; });
    for (auto& [identity, peer] : st.peers) {
      if (now - peer.last_sent < options_.keepalive_interval) continue;
      if (!send(identity, keepalive_message())) gone.push_back(identity);
    }
    for (const auto& identity : gone) drop_peer(identity);
  };

  // The broker went silent and the link started over: what was live had
  // clients the new connection cannot reach.
  const auto on_link_reset = [&] {
    size_t num_cancelled = 0;
    for (auto& [internal_id, live] : st.live) {
      if (live.orphaned) continue;
      live.orphaned = true;
      backend_.cancel(internal_id);
      ++num_cancelled;
    }
    if (num_cancelled > 0) spdlog::info("zmq: broker lost, cancelled {} request(s)", num_cancelled);
    st.peers.clear();
  };

  zmq::pollitem_t items[] = {{socket().handle(), 0, ZMQ_POLLIN, 0}, {nullptr, mailbox->fd(), ZMQ_POLLIN, 0}};
  auto stop_deadline = Clock::time_point::max();
  for (;;) {
    if (stopping_ && stop_deadline == Clock::time_point::max()) {
      // Stop: cancel what is live and give its final events a moment to go out.
      for (const auto& [internal_id, live] : st.live) backend_.cancel(internal_id);
      stop_deadline = Clock::now() + std::chrono::seconds(2);
    }
    if (stopping_ && (st.live.empty() || Clock::now() > stop_deadline)) break;
    try {
      // The link's pace may change when the broker acknowledges the registration.
      const auto half_keepalive = std::chrono::duration_cast<std::chrono::milliseconds>(options_.keepalive_interval / 2);
      zmq::poll(items, 2, st.link ? std::min(half_keepalive, st.link->tick_interval()) : half_keepalive);
      if (items[0].revents & ZMQ_POLLIN) handle_incoming();
      for (auto& posted : mailbox->take()) {
        if (!posted.internal_id.empty()) {
          handle_event(posted.internal_id, posted.event);
        } else if (auto peer = st.peers.find(posted.identity); peer != st.peers.end()) {
          --peer->second.pending_embeds;  // a peer gone meanwhile misses its reply
          if (!send(posted.identity, posted.reply)) drop_peer(posted.identity);
        }
      }
      if (cancel_all_.exchange(false)) {
        for (const auto& [internal_id, live] : st.live) backend_.cancel(internal_id);
      }
      send_keepalives();
      if (st.link && st.link->tick(draining_)) {
        on_link_reset();
        items[0].socket = socket().handle();
      }
    } catch (const std::exception& e) {
      // Never let the socket thread die: log, and serve the next message.
      spdlog::error("zmq server: {}", e.what());
    }
  }
  st.embedder.reset();  // waits for an embed under way
  if (st.link) st.link->close();
  st.router.close();
}

}  // namespace llmk::ipc
