#include <catch2/catch.hpp>

#include <chrono>
#include <thread>
#include <vector>

#include "actors/step_feedback.hpp"
#include "core/error.hpp"

using llmk::SampledIds;
using llmk::StepFeedback;
using namespace std::chrono_literals;

namespace {

// Publishes `ids` as step `step` from another thread after `delay`.
std::thread publish_later(StepFeedback& feedback, uint64_t step, std::vector<int32_t> ids,
                          std::chrono::microseconds delay) {
  return std::thread([&feedback, step, ids = std::move(ids), delay] {
    std::this_thread::sleep_for(delay);
    SampledIds s;
    s.data = ids.data();
    s.count = static_cast<int32_t>(ids.size());
    feedback.publish(step, s);  // copies host ids: `ids` dies with this thread
  });
}

}  // namespace

TEST_CASE("StepFeedback hands a step's ids to a waiter, published soon or late", "[step_feedback]") {
  // 50 us lands while the waiter still polls; 20 ms after it has gone to sleep.
  for (const auto delay : {0us, 50us, 20000us}) {
    CAPTURE(delay.count());
    StepFeedback feedback;
    for (uint64_t step = 1; step <= 3; ++step) {
      const std::vector<int32_t> ids = {static_cast<int32_t>(step * 10), 7, -1};
      std::thread t = publish_later(feedback, step, ids, delay);
      const SampledIds got = feedback.wait(step, 5000ms);
      t.join();
      REQUIRE_FALSE(got.failed);
      REQUIRE(got.count == 3);
      CHECK(std::vector<int32_t>(got.data, got.data + got.count) == ids);
    }
  }
}

TEST_CASE("StepFeedback reports failed steps, timeouts, out-of-order steps and a closed pipeline", "[step_feedback]") {
  StepFeedback feedback;
  feedback.fail(1);
  CHECK(feedback.wait(1, 1000ms).failed);

  // Nothing published for step 2: the wait gives up after its timeout (past the polling too).
  const auto t0 = std::chrono::steady_clock::now();
  try {
    feedback.wait(2, 30ms);
    FAIL("no timeout");
  } catch (const llmk::Error& e) {
    CHECK(e.code() == llmk::ErrorCode::internal);
    CHECK(std::string(e.what()).find("step 2") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - t0 >= 30ms);

  // Step 3 published while 2 is awaited: a bug in the order of steps, named as such.
  SampledIds none;
  feedback.publish(3, none);
  CHECK_THROWS_AS(feedback.wait(2, 1000ms), llmk::Error);

  // close() wakes a sleeping waiter with "cancelled".
  std::thread closer([&] {
    std::this_thread::sleep_for(20ms);
    feedback.close();
  });
  try {
    feedback.wait(4, 5000ms);
    FAIL("not woken");
  } catch (const llmk::Error& e) {
    CHECK(e.code() == llmk::ErrorCode::cancelled);
  }
  closer.join();
}

TEST_CASE("StepFeedback tells the executor when the sampler no longer reads a step's logits", "[step_feedback]") {
  StepFeedback feedback;
  // Marked before the wait, soon after it, and after the waiter has gone to sleep.
  feedback.sampled(1);
  feedback.wait_sampled(1, 1000ms);
  for (const auto delay : {50us, 20000us}) {
    const uint64_t step = delay == 50us ? 2 : 3;
    std::thread t([&feedback, step, delay] {
      std::this_thread::sleep_for(delay);
      feedback.sampled(step);
    });
    feedback.wait_sampled(step, 5000ms);
    t.join();
  }
  // A later step marked covers the earlier ones (the sampler takes steps in order).
  feedback.sampled(6);
  feedback.wait_sampled(5, 1000ms);
  // Never marked: the wait names the step after its timeout; close() cancels it.
  try {
    feedback.wait_sampled(7, 30ms);
    FAIL("no timeout");
  } catch (const llmk::Error& e) {
    CHECK(e.code() == llmk::ErrorCode::internal);
    CHECK(std::string(e.what()).find("logits of step 7") != std::string::npos);
  }
  std::thread closer([&] {
    std::this_thread::sleep_for(20ms);
    feedback.close();
  });
  try {
    feedback.wait_sampled(8, 5000ms);
    FAIL("not woken");
  } catch (const llmk::Error& e) {
    CHECK(e.code() == llmk::ErrorCode::cancelled);
  }
  closer.join();
}
