#include <catch2/catch.hpp>

#include <omp.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/cpu/work_shares.hpp"

using llmk::kernels::cpu::for_each_item;
using llmk::kernels::cpu::WorkShares;

TEST_CASE("for_each_item calls every item exactly once, on threads the team has", "[work_shares]") {
  for (const int threads : {1, 2, 3, 4, 8}) {
    for (const int64_t n : {0, 1, 2, 3, 7, 64, 1000}) {
      std::vector<std::atomic<int>> calls(static_cast<size_t>(n));
      std::atomic<int> bad_thread{0};
      for_each_item(n, threads, [&](int64_t i, int thread) {
        calls[static_cast<size_t>(i)].fetch_add(1);
        if (thread < 0 || thread >= threads || thread >= n) bad_thread.fetch_add(1);
      });
      INFO("threads " << threads << ", items " << n);
      CHECK(bad_thread.load() == 0);
      for (int64_t i = 0; i < n; ++i) CHECK(calls[static_cast<size_t>(i)].load() == 1);
    }
  }
}

TEST_CASE("one thread alone takes every share's items, its own in order", "[work_shares]") {
  // The serial case of a region whose `if` clause kept it on one thread.
  WorkShares shares(10, 3);
  std::vector<int64_t> order;
  shares.take(0, [&](int64_t i, int) { order.push_back(i); });
  // Share 0 is [0, 3) front to back, then shares 1 and 2 from their ends.
  CHECK(order == std::vector<int64_t>{0, 1, 2, 5, 4, 3, 9, 8, 7, 6});
  // A thread past the shares (a team larger than the shares cut) has none of
  // its own: it takes from the far ends only, starting with share 5 % 2.
  WorkShares two(10, 2);
  std::vector<int64_t> taken;
  two.take(5, [&](int64_t i, int) { taken.push_back(i); });
  CHECK(taken == std::vector<int64_t>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
}

TEST_CASE("a thread done with its share takes the rest of a slow thread's share from the far end", "[work_shares]") {
  // Thread 0 stalls in its first item until every other item is done (and
  // thread 1 starts only once thread 0 holds that item): thread 1 must then
  // have finished its own share and taken all of share 0 but item 0, last
  // item first.
  constexpr int64_t n = 32;
  std::atomic<int64_t> done{0};
  std::atomic<bool> zero_taken{false};
  std::mutex m;
  std::vector<int64_t> taken[2];
  std::atomic<bool> team_of_two{true}, waited_out{false};
  auto wait_for = [&](auto ready) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!ready()) {
      if (std::chrono::steady_clock::now() > give_up) {
        waited_out = true;
        return;
      }
      std::this_thread::yield();
    }
  };
  for_each_item(n, 2, [&](int64_t i, int thread) {
    if (omp_get_num_threads() != 2) team_of_two = false;
    if (thread == 0 && i == 0 && team_of_two) {
      zero_taken = true;
      wait_for([&] { return done.load() == n - 1; });
    }
    if (thread == 1 && i == n / 2 && team_of_two) wait_for([&] { return zero_taken.load(); });
    {
      std::lock_guard<std::mutex> lock(m);
      taken[thread].push_back(i);
    }
    done.fetch_add(1);
  });
  REQUIRE(team_of_two);
  REQUIRE_FALSE(waited_out);
  CHECK(taken[0] == std::vector<int64_t>{0});
  std::vector<int64_t> expected;
  for (int64_t i = n / 2; i < n; ++i) expected.push_back(i);     // its own share, in order
  for (int64_t i = n / 2 - 1; i >= 1; --i) expected.push_back(i);  // then share 0 from the end
  CHECK(taken[1] == expected);
}
