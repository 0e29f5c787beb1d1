// The broker's bookkeeping (ipc/broker_routes.hpp) without sockets: the
// least-loaded pick with ties in turn, and who must hear about a replica or
// a client that went away.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "ipc/broker_routes.hpp"

using llmk::ipc::BrokerRoutes;

TEST_CASE("the broker picks the replica with the fewest requests in flight, ties in turn", "[broker]") {
  BrokerRoutes routes;
  CHECK_FALSE(routes.pick_replica().has_value());
  CHECK(routes.add_replica("A", "a:1"));
  CHECK(routes.add_replica("B", "b:2"));
  CHECK(routes.add_replica("C", "c:3"));
  CHECK_FALSE(routes.add_replica("B", "b:2"));  // known already
  // Sequential requests that each finish before the next: strict rotation.
  std::vector<std::string> picked;
  for (int i = 0; i < 6; ++i) {
    const auto r = routes.pick_replica();
    REQUIRE(r.has_value());
    picked.push_back(*r);
    const BrokerRoutes::RequestKey key{"client", "r" + std::to_string(i)};
    routes.add_request(key);
    routes.assign(key, *r);
    routes.finish_request(key);
  }
  CHECK(picked == std::vector<std::string>{"A", "B", "C", "A", "B", "C"});

  // Requests that stay in flight: each pick is a replica whose load is the
  // minimum of all (an independent count kept here).
  std::map<std::string, int> load;
  for (int i = 0; i < 30; ++i) {
    const auto r = routes.pick_replica();
    REQUIRE(r.has_value());
    int min_load = 1 << 30;
    for (const auto& info : routes.replicas()) min_load = std::min(min_load, load[info.identity]);
    CHECK(load[*r] == min_load);
    const BrokerRoutes::RequestKey key{"c" + std::to_string(i % 4), "q" + std::to_string(i)};
    routes.add_request(key);
    routes.assign(key, *r);
    ++load[*r];
  }
  CHECK(load == std::map<std::string, int>{{"A", 10}, {"B", 10}, {"C", 10}});
  // Finishing requests on B makes it the pick.
  for (int i = 0; i < 30; ++i) {
    const BrokerRoutes::RequestKey key{"c" + std::to_string(i % 4), "q" + std::to_string(i)};
    if (routes.replica_of(key) == "B" && load["B"] > 7) {
      routes.finish_request(key);
      --load["B"];
    }
  }
  CHECK(routes.pick_replica() == "B");
  for (const auto& info : routes.replicas()) CHECK(info.num_in_flight == static_cast<size_t>(load[info.identity]));
  CHECK(routes.num_requests() == 27);
}

TEST_CASE("a draining replica gets no new requests; none left means no pick", "[broker]") {
  BrokerRoutes routes;
  routes.add_replica("A", "a");
  routes.add_replica("B", "b");
  routes.set_draining("A", true);
  for (int i = 0; i < 4; ++i) CHECK(routes.pick_replica() == "B");
  routes.set_draining("B", true);
  CHECK_FALSE(routes.pick_replica().has_value());
  routes.set_draining("A", false);
  CHECK(routes.pick_replica() == "A");
}

TEST_CASE("a dropped replica hands back exactly the requests it was serving", "[broker]") {
  BrokerRoutes routes;
  routes.add_replica("A", "a");
  routes.add_replica("B", "b");
  routes.add_request({"x", "1"});
  routes.assign({"x", "1"}, "A");
  routes.add_request({"x", "2"});
  routes.assign({"x", "2"}, "B");
  routes.add_request({"y", "1"});
  routes.assign({"y", "1"}, "A");
  routes.add_request({"y", "2"});  // still waiting for a replica
  auto lost = routes.remove_replica("A");
  std::sort(lost.begin(), lost.end());
  CHECK(lost == std::vector<BrokerRoutes::RequestKey>{{"x", "1"}, {"y", "1"}});
  CHECK_FALSE(routes.is_live({"x", "1"}));
  CHECK(routes.replica_of({"x", "2"}) == "B");
  CHECK(routes.replica_of({"y", "2"}) == "");
  CHECK(routes.num_requests() == 2);
  CHECK(routes.num_replicas() == 1);
  CHECK(routes.pick_replica() == "B");
  CHECK(routes.remove_replica("A").empty());
}

TEST_CASE("a client that leaves names every replica serving it, once each", "[broker]") {
  BrokerRoutes routes;
  for (const char* r : {"A", "B", "C"}) routes.add_replica(r, r);
  routes.add_request({"x", "1"});
  routes.assign({"x", "1"}, "A");
  routes.add_request({"x", "2"});
  routes.assign({"x", "2"}, "C");
  routes.add_request({"x", "3"});
  routes.assign({"x", "3"}, "A");
  routes.add_request({"x", "4"});  // waiting
  routes.add_request({"z", "1"});
  routes.assign({"z", "1"}, "B");
  auto serving = routes.remove_client("x");
  std::sort(serving.begin(), serving.end());
  CHECK(serving == std::vector<std::string>{"A", "C"});
  CHECK(routes.num_requests("x") == 0);
  CHECK(routes.num_requests() == 1);
  for (const auto& info : routes.replicas()) CHECK(info.num_in_flight == (info.identity == "B" ? 1u : 0u));
  CHECK(routes.remove_client("x").empty());
}
