// The ZeroMQ broker's bookkeeping, without sockets: which replicas are
// registered, which replica serves each client request, and whom to tell
// when a replica or a client goes away. ZmqBroker (ipc/zmq_broker.hpp)
// owns one and does the I/O; identities are the ROUTER routing ids.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace llmk::ipc {

class BrokerRoutes {
 public:
  // A client's request: [client identity, the client's request id].
  using RequestKey = std::pair<std::string, std::string>;

  struct ReplicaInfo {
    std::string identity;
    std::string name;
    bool draining = false;
    size_t num_in_flight = 0;
  };

  // Registers a replica (false when the identity is already registered:
  // then only its name is updated).
  bool add_replica(const std::string& replica, const std::string& name);
  // Forgets a replica; returns the requests it was serving (forgotten too:
  // their clients must hear an error).
  std::vector<RequestKey> remove_replica(const std::string& replica);
  bool has_replica(const std::string& replica) const { return replicas_.count(replica) != 0; }
  void set_draining(const std::string& replica, bool draining);
  // The registered replica that is not draining with the fewest requests
  // in flight; ties go in turn (each pick moves the turn past the chosen
  // one). nullopt when there is none.
  std::optional<std::string> pick_replica();
  size_t num_replicas() const { return order_.size(); }
  std::vector<ReplicaInfo> replicas() const;  // in registration order
  std::string name_of(const std::string& replica) const;

  // A request the broker accepted: waiting (no replica yet) until assigned.
  bool is_live(const RequestKey& request) const;
  void add_request(const RequestKey& request);
  void assign(const RequestKey& request, const std::string& replica);
  // The replica serving it; "" while it waits; nullopt when not live.
  std::optional<std::string> replica_of(const RequestKey& request) const;
  void finish_request(const RequestKey& request);  // no-op when not live
  size_t num_requests(const std::string& client) const;
  size_t num_requests() const { return num_requests_; }
  // Every live request with its replica ("" while it waits).
  std::vector<std::pair<RequestKey, std::string>> requests() const;
  // A client that left or vanished: forgets its requests and returns the
  // replicas that were serving any of them (each must hear its "bye").
  std::vector<std::string> remove_client(const std::string& client);

 private:
  struct Replica {
    std::string name;
    bool draining = false;
    std::set<RequestKey> requests;
  };

  std::unordered_map<std::string, Replica> replicas_;  // by identity
  std::vector<std::string> order_;                     // identities, registration order
  size_t next_turn_ = 0;                               // index into order_ where ties start
  // client identity -> its request id -> serving replica ("" while waiting)
  std::unordered_map<std::string, std::map<std::string, std::string>> clients_;
  size_t num_requests_ = 0;
};

}  // namespace llmk::ipc
