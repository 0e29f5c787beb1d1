// End to end: kv.paged (loaded as a plugin) under the scheduler's workload,
// its events published by ipc::KvEventPublisher on loopback, and a Python
// subscriber (pyzmq + msgpack from the project venv) that joins midway,
// replays what it missed and rebuilds the block set: it must equal the
// allocator's own cached_blocks().
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/plugin_loader.hpp"
#include "ipc/kv_event_publisher.hpp"
#include "ipc/support.hpp"
#include "scale_out/block_set.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"

using namespace llmk;

TEST_CASE("a Python subscriber rebuilds kv.paged's block set from the published events and replay",
          "[kv_events][python]") {
  if (!test::have_venv_python()) LLMK_SKIP("no project venv (.venv: scripts/setup.sh)");
  if (std::system((test::venv_python() + " -c 'import zmq, msgpack' 2>/dev/null").c_str()) != 0)
    LLMK_SKIP("the project venv lacks pyzmq or msgpack (scripts/setup.sh installs them)");

  KvEventsSection config;
  config.endpoint = "tcp://127.0.0.1:*";
  config.replay_endpoint = "tcp://127.0.0.1:*";
  config.topic = "kv@test";
  config.buffer_steps = 1000000;  // keep every batch: the subscriber replays from 0
  ipc::KvEventPublisher publisher(config);

  PluginRegistry registry;
  const uint32_t num_slots = 4 * 96;
  llmk_kv_allocator_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.num_slots = num_slots;
  desc.block_size = 8;
  desc.max_seq_len = 96;
  desc.enable_prefix_caching = 1;
  desc.options = "{}";
  desc.event_sink = &KvEventLog::sink;
  desc.event_sink_ctx = publisher.log().get();
  KvAllocatorImpl kv(registry.load("kv.paged", LLMK_PLUGIN_KV_ALLOCATOR), desc);
  sched_test::FakeModel model(num_slots);  // the KV the cached blocks stand for, across both halves

  // Before the subscriber joins: only the replay buffer has these batches.
  const auto jobs = kv_events_test::shared_prefix_jobs(11, 120);
  const std::vector<kv_events_test::Job> first(jobs.begin(), jobs.begin() + 60);
  const std::vector<kv_events_test::Job> second(jobs.begin() + 60, jobs.end());
  const SchedulerStats s1 = kv_events_test::run_jobs(kv, model, 96, first, [] {});

  const auto expect =
      std::filesystem::temp_directory_path() / ("llmk_kv_events_" + std::to_string(::getpid()) + ".json");
  std::filesystem::remove(expect);
  const std::string cmd = test::venv_python() + " " LLMK_SOURCE_DIR "/tests/scale_out/kv_events_subscriber.py" +
                          " --endpoint " + publisher.endpoint() + " --replay " + publisher.replay_endpoint() +
                          " --topic " + config.topic + " --expect " + expect.string() + " 2>&1";
  FILE* sub = ::popen(cmd.c_str(), "r");
  REQUIRE(sub != nullptr);
  char line[4096];
  REQUIRE(std::fgets(line, sizeof line, sub) != nullptr);
  REQUIRE(std::string(line) == "ready\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // its SUB connects (late joiners miss batches)

  // While it listens: these batches arrive live (any it misses, it replays).
  const SchedulerStats s2 = kv_events_test::run_jobs(kv, model, 96, second, [] {
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // spread over many batches
  });
  CHECK(s1.num_preemptions + s2.num_preemptions > 0);

  // Everything the allocator reported is published: then tell the subscriber where the stream ends.
  REQUIRE(test::eventually([&] { return publisher.num_events() == publisher.log()->num_appended(); }));
  const auto held = kv.cached_blocks();
  REQUIRE(held);
  CHECK(!held->empty());
  {
    std::ofstream(expect.string() + ".tmp") << nlohmann::json{{"last_seq", publisher.num_batches() - 1},
                                                               {"hashes", *held}}.dump();
    std::filesystem::rename(expect.string() + ".tmp", expect);
  }
  std::string output;
  while (std::fgets(line, sizeof line, sub) != nullptr) output += line;
  const int status = ::pclose(sub);
  std::filesystem::remove(expect);
  INFO(output);
  REQUIRE(status == 0);
  const auto summary = nlohmann::json::parse(output);
  CHECK(summary["ok"] == true);
  CHECK(summary["blocks"] == held->size());
  CHECK(summary["live"].get<int>() > 0);      // the PUB socket delivered
  CHECK(summary["replayed"].get<int>() > 0);  // and replay filled in what came before
  CHECK(summary["removed"].get<int>() > 0);   // evictions happened
  CHECK(publisher.log()->num_dropped() == 0);
}

#ifdef LLMK_HAVE_ENGINE
#include "ipc/serve_process.hpp"

TEST_CASE("llmk serve with kv_events publishes kv.paged's blocks of the prompts it served", "[kv_events][serve]") {
  if (!test::have_venv_python()) LLMK_SKIP("no project venv (.venv: scripts/setup.sh)");
  if (std::system((test::venv_python() + " -c 'import zmq, msgpack' 2>/dev/null").c_str()) != 0)
    LLMK_SKIP("the project venv lacks pyzmq or msgpack (scripts/setup.sh installs them)");
  const auto dir = std::filesystem::temp_directory_path();
  const std::string tag = std::to_string(::getpid());
  const std::string pub = "ipc://" + (dir / ("llmk_kv_pub_" + tag)).string();
  const std::string replay = "ipc://" + (dir / ("llmk_kv_replay_" + tag)).string();
  test::ServeProcess serve({"--set", "plugins.kv_allocator=kv.paged", "--set", "kv_events.endpoint=" + pub, "--set",
                            "kv_events.replay_endpoint=" + replay});
  REQUIRE(serve.wait_ready());
  const std::string body = R"({"prompt": "Once upon a time, there was a little girl named Lily. She loved to play )"
                           R"(outside in the park with her friends.", "max_tokens": 20, "temperature": 0})";
  for (int i = 0; i < 2; ++i) REQUIRE(test::curl(serve.http_port(), "POST", "/v1/completions", body).status == 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the publisher's next round
  const auto run = test::run_command(test::venv_python() + " " LLMK_SOURCE_DIR
                                     "/tests/scale_out/kv_events_subscriber.py --endpoint " + pub + " --replay " +
                                     replay + " --replay-only");
  INFO(run.out << "\n" << serve.log());
  REQUIRE(run.status == 0);
  const auto summary = nlohmann::json::parse(run.out);
  CHECK(summary["first_event"] == "AllBlocksCleared");
  CHECK(summary["stored"].get<int>() >= 2);  // the prompt's full blocks (16 tokens each) and some generated ones
  CHECK(summary["blocks"].get<int>() >= 2);
  CHECK(summary["block_sizes"] == nlohmann::json::array({16}));
  // A clean stop removes the two socket files it bound.
  serve.signal(SIGTERM);
  CHECK(serve.wait_exit(std::chrono::seconds(30)) == 0);
  CHECK_FALSE(std::filesystem::exists(pub.substr(6)));
  CHECK_FALSE(std::filesystem::exists(replay.substr(6)));
}
#endif  // LLMK_HAVE_ENGINE
