#include "ipc/zmq_broker.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "core/error.hpp"
#include "ipc/broker_routes.hpp"
#include "ipc/errors.hpp"
#include "ipc/ipc_socket_file.hpp"
#include "ipc/zmq_protocol.hpp"

namespace llmk::ipc {
namespace {

using Clock = std::chrono::steady_clock;
using Frames = std::vector<zmq::message_t>;
using nlohmann::json;

// What the broker reads of a message to route it. Never throws.
struct Peek {
  bool ok = false;  // a JSON object with "v": 1 and a string "type"
  std::string type;
  json id;          // null when absent
  json ref;
  bool done = false;
};

Peek peek(std::string_view payload) {
  Peek p;
  const json j = json::parse(payload, nullptr, false);
  if (!j.is_object()) return p;
  const auto type = j.find("type");
  const auto v = j.find("v");
  p.ok = type != j.end() && type->is_string() && v != j.end() && v->is_number_integer() &&
         *v == zmq_protocol_version;
  if (!p.ok) return p;
  p.type = type->get<std::string>();
  p.id = j.value("id", json());
  p.ref = j.value("ref", json());
  const auto done = j.find("done");
  p.done = done != j.end() && done->is_boolean() && done->get<bool>();
  return p;
}

// Sends [identity][parts...] on a ROUTER (the parts are consumed); false,
// leaving the parts as they were, when the peer is gone (unroutable under
// ZMQ_ROUTER_MANDATORY) or so far behind that its queue is full.
bool send_to(zmq::socket_t& router, const std::string& identity, Frames& parts) {
  try {
    if (!router.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return false;
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) return false;
    throw;
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    router.send(parts[i], i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  return true;
}

Frames payload_parts(const std::string& payload, bool delimiter) {
  Frames parts;
  if (delimiter) parts.emplace_back();
  parts.emplace_back(payload.data(), payload.size());
  return parts;
}

std::string ms_string(Clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
}

}  // namespace

struct ZmqBroker::Core {
  // A message waiting for a replica: a submit (tracked by its request id) or
  // anything else a replica answers (id "").
  struct Waiting {
    std::string client;
    std::string id;
    Frames parts;  // the client's frames after its identity
    Clock::time_point deadline;
  };
  struct ClientState {
    bool delimiter = false;  // mirror the client's last message
    Clock::time_point last_sent = Clock::now();
  };
  struct ReplicaClock {
    Clock::time_point last_heard = Clock::now();
    Clock::time_point last_sent = Clock::now();
  };

  explicit Core(ZmqBrokerOptions o) : options(std::move(o)) {}

  const ZmqBrokerOptions options;
  zmq::context_t context{1};
  zmq::socket_t clients{context, zmq::socket_type::router};
  zmq::socket_t workers{context, zmq::socket_type::router};
  IpcSocketFile clients_file, workers_file;  // ipc:// endpoints' files, removed at shutdown
  BrokerRoutes routes;
  std::deque<Waiting> waiting;
  std::unordered_map<std::string, ClientState> client_states;  // clients with requests (or just heard)
  std::unordered_map<std::string, ReplicaClock> replica_clocks;

  std::chrono::milliseconds heartbeat_interval() const { return std::chrono::milliseconds(options.heartbeat_interval_ms); }
  std::chrono::milliseconds heartbeat_timeout() const { return std::chrono::milliseconds(options.heartbeat_timeout_ms); }

  // ---- to clients -------------------------------------------------------

  // Forwards or sends to a client; one it cannot reach has vanished.
  bool to_client(const std::string& client, Frames& parts) {
    if (!send_to(clients, client, parts)) {
      client_gone(client, "unreachable");
      return false;
    }
    client_states[client].last_sent = Clock::now();
    return true;
  }
  bool reply(const std::string& client, const json& msg) {
    Frames parts = payload_parts(dump_json(msg), client_states[client].delimiter);
    return to_client(client, parts);
  }
  bool reply_error(const std::string& client, const ErrorReply& error, const json& id) {
    return reply(client, to_zmq_json(error, id));
  }

  // A client that left (bye) or vanished: its replicas hear its bye, which
  // cancels its requests there; what still waits here is dropped.
  void client_gone(const std::string& client, const char* why) {
    const size_t num_requests = routes.num_requests(client);
    const std::vector<std::string> serving = routes.remove_client(client);
    const std::string bye = dump_json({{"v", zmq_protocol_version}, {"type", "bye"}});
    for (const std::string& replica : serving) {
      Frames parts;
      parts.emplace_back(client.data(), client.size());
      parts.emplace_back(bye.data(), bye.size());
      (void)to_replica(replica, parts);  // one that is gone is found by its heartbeats
    }
    std::erase_if(waiting, [&](const Waiting& w) { return w.client == client; });
    client_states.erase(client);
    if (num_requests > 0) {
      spdlog::info("broker: a client left ({}): cancelled its {} request(s) on {} replica(s)", why, num_requests,
                   serving.size());
    }
  }

  // ---- to replicas ------------------------------------------------------

  bool to_replica(const std::string& replica, Frames& parts) {
    if (!send_to(workers, replica, parts)) return false;
    replica_clocks[replica].last_sent = Clock::now();
    return true;
  }
  bool control(const std::string& replica, const json& msg) {
    Frames parts = payload_parts(dump_json(msg), true);
    return to_replica(replica, parts);
  }

  // Forgets a replica; each request it was serving ends with an error
  // naming it, so its client does not wait for a reply that cannot come.
  void drop_replica(const std::string& replica, const std::string& why, bool expected = false) {
    if (!routes.has_replica(replica)) return;
    const std::string name = routes.name_of(replica);
    const auto lost = routes.remove_replica(replica);
    replica_clocks.erase(replica);
    spdlog::log(expected && lost.empty() ? spdlog::level::info : spdlog::level::warn,
                "broker: replica '{}' dropped ({}); {} request(s) it was serving failed; {} replica(s) registered",
                name, why, lost.size(), routes.num_replicas());
    for (const auto& [client, id] : lost) {
      reply_error(client,
                  error_reply(ErrorCode::peer_lost, "replica '" + name + "' was lost (" + why +
                                                        ") while serving request '" + id + "'"),
                  id);
    }
  }

  // ---- messages ---------------------------------------------------------

  void on_client_message(Frames& frames) {
    const std::string client = frames[0].to_string();
    Frames parts(std::make_move_iterator(frames.begin() + 1), std::make_move_iterator(frames.end()));
    if (parts.empty()) return;
    const bool delimiter = parts.size() == 2 && parts[0].size() == 0;
    client_states[client].delimiter = delimiter;
    const Peek p = parts.size() == 1 || delimiter ? peek(parts.back().to_string_view()) : Peek{};
    // An empty id is not usable (a replica refuses it): such a message is not routed by its id.
    const bool has_id = p.id.is_string() && !p.id.get_ref<const std::string&>().empty();
    const auto key = BrokerRoutes::RequestKey{client, has_id ? p.id.get<std::string>() : ""};
    // What the broker does not route by meaning (bad messages, stats)
    // goes to a replica, whose answer (an error, the stats) comes back.
    const auto to_any = [&] { waiting.push_back({client, "", std::move(parts), deadline()}); };
    if (!p.ok) return to_any();
    if (p.type == "submit" && has_id) {
      if (routes.is_live(key)) {
        return (void)reply_error(client,
                                 error_reply(ErrorCode::invalid_argument,
                                             "request id '" + key.second + "' is already live on this connection", "id"),
                                 p.id);
      }
      routes.add_request(key);
      waiting.push_back({client, key.second, std::move(parts), deadline()});
    } else if (p.type == "cancel" && has_id) {
      const auto replica = routes.replica_of(key);
      if (!replica) {
        return (void)reply_error(
            client, error_reply(ErrorCode::not_found, "no live request with id '" + key.second + "'", "id"), p.id);
      }
      if (replica->empty()) return cancel_waiting(key);
      Frames forward;
      forward.emplace_back(client.data(), client.size());
      for (auto& part : parts) forward.push_back(std::move(part));
      if (!to_replica(*replica, forward)) drop_replica(*replica, "its connection is closed");
    } else if (p.type == "ping") {
      reply(client, pong_message(p.ref));
    } else if (p.type == "health") {
      reply(client, health(p.ref));
    } else if (p.type == "bye") {
      client_gone(client, "bye");
    } else {
      to_any();
    }
  }

  // A cancelled request that never reached a replica: its answer is the
  // final event a replica would have sent.
  void cancel_waiting(const BrokerRoutes::RequestKey& key) {
    std::erase_if(waiting, [&](const Waiting& w) { return w.client == key.first && w.id == key.second; });
    routes.finish_request(key);
    RequestEvent ev;
    ev.finished = ev.request_done = true;
    ev.finish_reason = FinishReason::cancelled;
    reply(key.first, final_message(key.second, ev, "", {}));
  }

  void on_replica_message(Frames& frames) {
    if (frames.size() < 3) return;
    const std::string replica = frames[0].to_string();
    if (frames[1].size() == 0) return on_control(replica, frames.back().to_string_view());
    if (!routes.has_replica(replica)) return;  // dropped earlier: it registers again when it notices
    replica_clocks[replica].last_heard = Clock::now();
    const std::string client = frames[1].to_string();
    const Peek p = peek(frames.back().to_string_view());
    Frames parts(std::make_move_iterator(frames.begin() + 2), std::make_move_iterator(frames.end()));
    if (!to_client(client, parts)) return;
    if (!p.id.is_string()) return;
    const BrokerRoutes::RequestKey key{client, p.id.get<std::string>()};
    // A request ends with its last final or with an error.
    if ((p.type == "final" && p.done) || p.type == "error") {
      if (routes.replica_of(key) == replica) routes.finish_request(key);
    }
  }

  void on_control(const std::string& replica, std::string_view payload) {
    const json msg = json::parse(payload, nullptr, false);
    if (!msg.is_object() || !msg.contains("type") || !msg["type"].is_string()) return;
    const std::string type = msg["type"];
    const bool draining = msg.value("draining", false);
    if (type == "register") {
      const std::string name = msg.contains("name") && msg["name"].is_string() ? msg["name"].get<std::string>() : "";
      // A replica that starts over registers on a new connection and closes
      // the old one, which the next heartbeat to it finds closed.
      const bool added = routes.add_replica(replica, name.empty() ? "unnamed" : name);
      routes.set_draining(replica, draining);
      replica_clocks[replica] = {};
      control(replica, {{"v", zmq_protocol_version},
                        {"type", "registered"},
                        {"heartbeat_ms", options.heartbeat_interval_ms},
                        {"heartbeat_timeout_ms", options.heartbeat_timeout_ms}});
      if (added) {
        spdlog::info("broker: replica '{}' registered; {} replica(s) registered", routes.name_of(replica),
                     routes.num_replicas());
      }
      return;
    }
    if (!routes.has_replica(replica)) {
      // Dropped earlier (or a new connection): its requests are failed here,
      // so it must start over with a new connection and register.
      if (type == "heartbeat") control(replica, {{"v", zmq_protocol_version}, {"type", "register_again"}});
      return;
    }
    replica_clocks[replica].last_heard = Clock::now();
    if (type == "heartbeat") {
      routes.set_draining(replica, draining);
    } else if (type == "unregister") {
      drop_replica(replica, "it left", true);
    }
  }

  json health(const json& ref) const {
    json replicas = json::array();
    bool any_ready = false;
    for (const auto& r : routes.replicas()) {
      replicas.push_back({{"name", r.name}, {"num_in_flight", r.num_in_flight}, {"draining", r.draining}});
      any_ready = any_ready || !r.draining;
    }
    const char* status = any_ready ? "ok" : routes.num_replicas() > 0 ? "draining" : "no_replicas";
    return {{"v", zmq_protocol_version}, {"type", "health"},       {"ref", ref},
            {"status", status},          {"num_replicas", routes.num_replicas()},
            {"num_waiting", waiting.size()}, {"replicas", replicas}};
  }

  Clock::time_point deadline() const { return Clock::now() + std::chrono::milliseconds(options.queue_timeout_ms); }

  // ---- timers -----------------------------------------------------------

  // Sends what waits to the replicas, least loaded first.
  void dispatch() {
    while (!waiting.empty()) {
      const auto replica = routes.pick_replica();
      if (!replica) return;
      Waiting& w = waiting.front();
      Frames forward;
      forward.emplace_back(w.client.data(), w.client.size());
      for (auto& part : w.parts) forward.push_back(std::move(part));
      if (!to_replica(*replica, forward)) {
        // Nothing was sent: the parts go back, and the next replica is tried.
        w.parts.assign(std::make_move_iterator(forward.begin() + 1), std::make_move_iterator(forward.end()));
        drop_replica(*replica, "its connection is closed");
        continue;
      }
      if (!w.id.empty()) routes.assign({w.client, w.id}, *replica);
      waiting.pop_front();
    }
  }

  void expire_waiting(Clock::time_point now) {
    while (!waiting.empty() && waiting.front().deadline <= now) {
      Waiting w = std::move(waiting.front());
      waiting.pop_front();
      const json id = w.id.empty() ? error_reply_id(w.parts.back().to_string_view()) : json(w.id);
      if (!w.id.empty()) routes.finish_request({w.client, w.id});
      reply_error(w.client,
                  error_reply(ErrorCode::overloaded,
                              "no replica took the message within " + std::to_string(options.queue_timeout_ms) +
                                  " ms (llmk broker --queue-timeout-ms): " + std::to_string(routes.num_replicas()) +
                                  " replica(s) registered, none accepting requests"),
                  id);
    }
  }

  void tick() {
    const auto now = Clock::now();
    for (const auto& r : routes.replicas()) {
      const ReplicaClock& clock = replica_clocks[r.identity];
      if (now - clock.last_heard > heartbeat_timeout()) {
        drop_replica(r.identity, "silent for " + ms_string(now - clock.last_heard));
      } else if (now - clock.last_sent >= heartbeat_interval() &&
                 !control(r.identity, {{"v", zmq_protocol_version}, {"type", "heartbeat"}})) {
        drop_replica(r.identity, "its connection is closed");
      }
    }
    expire_waiting(now);
    std::vector<std::string> to_keep_alive;
    for (auto it = client_states.begin(); it != client_states.end();) {
      if (routes.num_requests(it->first) == 0 && std::none_of(waiting.begin(), waiting.end(), [&](const Waiting& w) {
            return w.client == it->first;
          })) {
        it = client_states.erase(it);
        continue;
      }
      if (now - it->second.last_sent >= options.keepalive_interval) to_keep_alive.push_back(it->first);
      ++it;
    }
    for (const std::string& client : to_keep_alive) reply(client, keepalive_message());
  }

  // The broker stops: nothing it routes can be answered any more.
  void shut_down() {
    std::vector<std::string> gone;
    for (const auto& [key, replica] : routes.requests()) {
      reply_error(key.first, error_reply(ProtocolFailure::shutting_down, "the broker is shutting down"), key.second);
      gone.push_back(key.first);
    }
    for (const std::string& client : gone) client_gone(client, "the broker stops");
  }
};

ZmqBroker::ZmqBroker(ZmqBrokerOptions options) : core_(std::make_unique<Core>(std::move(options))) {
  Core& c = *core_;
  if (c.options.heartbeat_timeout_ms <= c.options.heartbeat_interval_ms || c.options.heartbeat_interval_ms <= 0) {
    throw Error(ErrorCode::invalid_config,
                "the broker's heartbeat timeout (--heartbeat-timeout-ms " +
                    std::to_string(c.options.heartbeat_timeout_ms) +
                    ") must be longer than its heartbeat interval (--heartbeat-ms " +
                    std::to_string(c.options.heartbeat_interval_ms) + ", a positive number)");
  }
  for (zmq::socket_t* socket : {&c.clients, &c.workers}) {
    socket->set(zmq::sockopt::router_mandatory, 1);
    socket->set(zmq::sockopt::linger, 0);
    socket->set(zmq::sockopt::sndhwm, 1 << 20);
    socket->set(zmq::sockopt::rcvhwm, 1 << 20);
    socket->set(zmq::sockopt::heartbeat_ivl, c.options.heartbeat_interval_ms);
    socket->set(zmq::sockopt::heartbeat_timeout, c.options.heartbeat_timeout_ms);
  }
  const auto bind = [](zmq::socket_t& socket, const std::string& endpoint, const char* what) {
    try {
      socket.bind(endpoint);
    } catch (const zmq::error_t& e) {
      throw Error(ErrorCode::invalid_config, std::string("cannot bind the broker's ") + what + " endpoint " +
                                                 endpoint + ": " + e.what());
    }
    return socket.get(zmq::sockopt::last_endpoint);
  };
  clients_endpoint_ = bind(c.clients, c.options.clients, "clients");
  workers_endpoint_ = bind(c.workers, c.options.workers, "workers");
  c.clients_file = IpcSocketFile(clients_endpoint_);
  c.workers_file = IpcSocketFile(workers_endpoint_);
  thread_ = std::thread([this] {
    Core& c = *core_;
    zmq::pollitem_t items[] = {{c.workers.handle(), 0, ZMQ_POLLIN, 0}, {c.clients.handle(), 0, ZMQ_POLLIN, 0}};
    const auto tick_every = std::max(std::chrono::milliseconds(5),
                                     std::min(c.heartbeat_interval(), c.options.keepalive_interval) / 4);
    auto last_tick = Clock::now();
    while (!stopping_) {
      try {
        zmq::poll(items, 2, tick_every);
        // Replicas first: registrations and replies make room for what waits.
        for (int budget = 0; budget < 256; ++budget) {
          Frames frames;
          if (!zmq::recv_multipart(c.workers, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
          c.on_replica_message(frames);
        }
        for (int budget = 0; budget < 256; ++budget) {
          Frames frames;
          if (!zmq::recv_multipart(c.clients, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
          c.on_client_message(frames);
        }
        c.dispatch();
        // Timers at their own pace, not once per burst of messages.
        if (Clock::now() - last_tick >= tick_every) {
          c.tick();
          last_tick = Clock::now();
        }
        num_replicas_ = c.routes.num_replicas();
      } catch (const std::exception& e) {
        // Never let the routing thread die: log, and route the next message.
        spdlog::error("broker: {}", e.what());
      }
    }
    try {
      c.shut_down();
    } catch (const std::exception& e) {
      spdlog::error("broker: {}", e.what());
    }
  });
}

ZmqBroker::~ZmqBroker() { stop(); }

void ZmqBroker::stop() {
  if (!thread_.joinable()) return;
  stopping_ = true;
  thread_.join();
  core_->clients.set(zmq::sockopt::linger, 200);  // the shutdown errors and byes go out
  core_->workers.set(zmq::sockopt::linger, 200);
  core_->clients.close();
  core_->workers.close();
}

}  // namespace llmk::ipc
