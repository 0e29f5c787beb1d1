#include "ipc/broker_routes.hpp"

#include <algorithm>

namespace llmk::ipc {

bool BrokerRoutes::add_replica(const std::string& replica, const std::string& name) {
  auto [it, added] = replicas_.try_emplace(replica);
  it->second.name = name;
  if (added) order_.push_back(replica);
  return added;
}

std::vector<BrokerRoutes::RequestKey> BrokerRoutes::remove_replica(const std::string& replica) {
  auto it = replicas_.find(replica);
  if (it == replicas_.end()) return {};
  std::vector<RequestKey> lost(it->second.requests.begin(), it->second.requests.end());
  for (const RequestKey& request : lost) {
    auto client = clients_.find(request.first);
    if (client == clients_.end()) continue;
    num_requests_ -= client->second.erase(request.second);
    if (client->second.empty()) clients_.erase(client);
  }
  replicas_.erase(it);
  const auto pos = std::find(order_.begin(), order_.end(), replica);
  const auto index = static_cast<size_t>(pos - order_.begin());
  order_.erase(pos);
  if (index < next_turn_) --next_turn_;  // the turn stays with the same replica
  if (next_turn_ >= order_.size()) next_turn_ = 0;
  return lost;
}

void BrokerRoutes::set_draining(const std::string& replica, bool draining) {
  auto it = replicas_.find(replica);
  if (it != replicas_.end()) it->second.draining = draining;
}

std::optional<std::string> BrokerRoutes::pick_replica() {
  std::optional<size_t> best;
  size_t best_load = 0;
  for (size_t k = 0; k < order_.size(); ++k) {
    const size_t i = (next_turn_ + k) % order_.size();
    const Replica& r = replicas_.at(order_[i]);
    if (r.draining) continue;
    if (!best || r.requests.size() < best_load) {
      best = i;
      best_load = r.requests.size();
    }
  }
  if (!best) return std::nullopt;
  next_turn_ = (*best + 1) % order_.size();
  return order_[*best];
}

std::vector<BrokerRoutes::ReplicaInfo> BrokerRoutes::replicas() const {
  std::vector<ReplicaInfo> out;
  for (const std::string& identity : order_) {
    const Replica& r = replicas_.at(identity);
    out.push_back({identity, r.name, r.draining, r.requests.size()});
  }
  return out;
}

std::string BrokerRoutes::name_of(const std::string& replica) const {
  auto it = replicas_.find(replica);
  return it == replicas_.end() ? "" : it->second.name;
}

bool BrokerRoutes::is_live(const RequestKey& request) const { return replica_of(request).has_value(); }

void BrokerRoutes::add_request(const RequestKey& request) {
  if (clients_[request.first].emplace(request.second, "").second) ++num_requests_;
}

void BrokerRoutes::assign(const RequestKey& request, const std::string& replica) {
  auto client = clients_.find(request.first);
  if (client == clients_.end()) return;
  auto it = client->second.find(request.second);
  auto r = replicas_.find(replica);
  if (it == client->second.end() || r == replicas_.end()) return;
  if (auto old = replicas_.find(it->second); old != replicas_.end()) old->second.requests.erase(request);
  it->second = replica;
  r->second.requests.insert(request);
}

std::optional<std::string> BrokerRoutes::replica_of(const RequestKey& request) const {
  auto client = clients_.find(request.first);
  if (client == clients_.end()) return std::nullopt;
  auto it = client->second.find(request.second);
  if (it == client->second.end()) return std::nullopt;
  return it->second;
}

void BrokerRoutes::finish_request(const RequestKey& request) {
  auto client = clients_.find(request.first);
  if (client == clients_.end()) return;
  auto it = client->second.find(request.second);
  if (it == client->second.end()) return;
  if (auto r = replicas_.find(it->second); r != replicas_.end()) r->second.requests.erase(request);
  client->second.erase(it);
  --num_requests_;
  if (client->second.empty()) clients_.erase(client);
}

size_t BrokerRoutes::num_requests(const std::string& client) const {
  auto it = clients_.find(client);
  return it == clients_.end() ? 0 : it->second.size();
}

std::vector<std::pair<BrokerRoutes::RequestKey, std::string>> BrokerRoutes::requests() const {
  std::vector<std::pair<RequestKey, std::string>> out;
  for (const auto& [client, requests] : clients_) {
    for (const auto& [id, replica] : requests) out.push_back({{client, id}, replica});
  }
  return out;
}

std::vector<std::string> BrokerRoutes::remove_client(const std::string& client) {
  auto it = clients_.find(client);
  if (it == clients_.end()) return {};
  std::set<std::string> serving;
  for (const auto& [id, replica] : it->second) {
    if (replica.empty()) continue;
    serving.insert(replica);
    if (auto r = replicas_.find(replica); r != replicas_.end()) r->second.requests.erase({client, id});
  }
  num_requests_ -= it->second.size();
  clients_.erase(it);
  return {serving.begin(), serving.end()};
}

}  // namespace llmk::ipc
