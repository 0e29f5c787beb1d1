// StreamingLLM in the scheduler (kv_cache.window, sink_tokens) over the real
// forward: stories260K through the KV allocator plugins, greedy. A stream
// far longer than the context keeps its KV memory at the window; while a
// sequence is shorter than the window it decodes what full attention
// decodes; a shifted sequence puts nothing more into the prefix cache; and
// the settings that cannot work are refused, naming the key.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/model.hpp"
#include "core/model_runtime.hpp"
#include "core/plugin_loader.hpp"
#include "core/scheduler.hpp"
#include "scheduler_fakes.hpp"

using namespace llmk;
using Catch::Contains;

namespace {

// The model, an allocator plugin over its slots and a scheduler with the
// config's window, driven synchronously: plan, forward, argmax, update.
struct StreamRig {
  std::shared_ptr<const Checkpoint> ckpt = load_checkpoint(std::string(LLMK_SHARED_DIR) + "/models/stories260K");
  PluginRegistry plugins;
  EngineConfig cfg;
  ModelRuntime rt;
  std::unique_ptr<Model> model;
  std::unique_ptr<KvAllocatorImpl> kv;
  std::unique_ptr<Scheduler> sched;

  StreamRig(const std::string& allocator, uint32_t window, uint32_t sinks, uint32_t max_seq_len, uint32_t capacity,
            bool prefix_caching = false, uint32_t batched_tokens = 64) {
    cfg.executor.num_threads = 1;  // a model this small waits on a second thread more than it gains
    cfg.kv_cache.block_size = 16;
    cfg.kv_cache.max_seq_len = max_seq_len;
    cfg.kv_cache.capacity_tokens = capacity;
    cfg.kv_cache.window = window;
    cfg.kv_cache.sink_tokens = sinks;
    cfg.kv_cache.enable_prefix_caching = prefix_caching;
    validate(cfg);
    rt = resolve_runtime(cfg, *ckpt);
    model = std::make_unique<Model>(ckpt, plugins, cfg, rt);
    const llmk_kv_allocator_desc desc{sizeof(llmk_kv_allocator_desc), rt.num_kv_slots, 16, rt.max_seq_len,
                                      prefix_caching ? 1 : 0, "{}", nullptr, nullptr};
    kv = std::make_unique<KvAllocatorImpl>(plugins.load(allocator, LLMK_PLUGIN_KV_ALLOCATOR), desc);
    SchedulerSection section;
    section.max_num_seqs = 4;
    section.max_num_batched_tokens = batched_tokens;
    SchedulerOptions options;
    options.stream = StreamWindow{int32_t(window), int32_t(sinks), 16};
    sched = std::make_unique<Scheduler>(section, SchedulerLimits{int32_t(rt.max_seq_len), {}, vocab()}, *kv, options);
  }
  int32_t vocab() const { return ckpt->config().vocab_size; }

  // Runs every request to its end; after_step sees the scheduler after each update.
  std::map<std::string, std::vector<int32_t>> run(const std::function<void(const Scheduler&)>& after_step = {}) {
    std::map<std::string, std::vector<int32_t>> got;
    std::vector<float> logits;
    while (sched->has_work()) {
      StepPlan plan = sched->schedule();
      REQUIRE(plan.events.empty());
      REQUIRE_FALSE(plan.empty());
      logits.resize(size_t(plan.batch.num_logits()) * size_t(vocab()));
      model->forward(plan.batch, logits.data());
      std::vector<int32_t> sampled;
      for (int32_t r = 0; r < plan.batch.num_logits(); ++r) {
        const float* row = logits.data() + size_t(r) * size_t(vocab());
        sampled.push_back(int32_t(std::max_element(row, row + vocab()) - row));
      }
      for (const TokenEvent& e : sched->update_from_output(plan, sampled)) {
        REQUIRE(e.error == "");
        if (e.token_id) got[e.request_id].push_back(*e.token_id);
      }
      if (after_step) after_step(*sched);
    }
    return got;
  }
};

SamplingParams greedy(int32_t max_tokens) {
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = max_tokens;
  sp.ignore_eos = true;
  return sp;
}

std::vector<int32_t> random_prompt(uint32_t seed, int32_t length, int32_t vocab) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(3, vocab - 1);
  std::vector<int32_t> p{1};  // BOS
  while (int32_t(p.size()) < length) p.push_back(tok(rng));
  return p;
}

}  // namespace

TEST_CASE("a 20,000-token stream through a 2,048-row window keeps its KV memory flat, past the context length "
          "(6,000 tokens under the sanitizers)",
          "[scheduler][stream]") {
  // kv.paged drops whole blocks; the ranges of kv.contiguous and kv.vm move
  // their rows down (a shorter stream: each eviction copies the window).
  // The sanitized build runs kv.paged's stream to 6,000 tokens, nearly three
  // windows past the context length: every step after the first shift is
  // the same code, and 20,000 of them take minutes there.
  const int32_t paged_tokens = std::getenv("LLMK_TEST_SANITIZED") != nullptr ? 6000 : 20000;
  const auto [allocator, num_tokens] = GENERATE_COPY(
      table<std::string, int32_t>({{"kv.paged", paged_tokens}, {"kv.contiguous", 3000}, {"kv.vm", 3000}}));
  const uint32_t window = 2048;
  StreamRig rig(allocator, window, 16, window, 2 * window);
  REQUIRE(rig.rt.max_seq_len == window);
  rig.sched->add_request("s", random_prompt(5, 4, rig.vocab()), greedy(num_tokens - 4));
  uint64_t peak_reserved = 0, reserved_at_fill = 0;
  int32_t peak_rows = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const auto got = rig.run([&](const Scheduler& s) {
    const llmk_kv_usage u = s.stats().kv;
    const Sequence* seq = s.sequence(1);
    if (seq == nullptr) return;
    peak_rows = std::max(peak_rows, seq->num_cache_rows);
    CHECK(u.used_slots <= window);
    if (seq->num_tokens() > int32_t(window) + 16) {  // the window has filled and shifted
      if (reserved_at_fill == 0) reserved_at_fill = u.reserved_slots;
      peak_reserved = std::max(peak_reserved, u.reserved_slots);
    }
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(allocator << ": " << num_tokens << " tokens in " << seconds << " s");
  REQUIRE(got.at("s").size() == size_t(num_tokens - 4));  // ended by max_tokens, not by the context
  CHECK(peak_rows == int32_t(window));
  CHECK(reserved_at_fill > 0);
  CHECK(peak_reserved == reserved_at_fill);  // flat from the first eviction to the end
  CHECK(peak_reserved <= 2 * window);
  if (allocator == "kv.paged") CHECK(peak_reserved == window);  // 128 blocks, never more
  const SchedulerStats stats = rig.sched->stats();
  CHECK(stats.num_evicted_tokens >= uint64_t(num_tokens - int32_t(window)));
  CHECK(stats.kv.num_seqs == 0);
  CHECK(stats.kv.used_slots == 0);
}

TEST_CASE("greedy output with sinks and a window equals full attention while sequences are shorter than the window",
          "[scheduler][stream]") {
  const std::string allocator = GENERATE(as<std::string>{}, "kv.paged", "kv.contiguous", "kv.vm");
  INFO(allocator);
  std::map<std::string, std::vector<int32_t>> outputs[2];
  for (int streaming = 0; streaming < 2; ++streaming) {
    StreamRig rig(allocator, streaming ? 256 : 0, streaming ? 16 : 0, 512, 1024, false, 48);
    for (int i = 0; i < 3; ++i)
      rig.sched->add_request("r" + std::to_string(i), random_prompt(10 + i, 20 + 17 * i, rig.vocab()),
                             greedy(150 + 20 * i));
    outputs[streaming] = rig.run();
    CHECK(rig.sched->stats().num_evicted_tokens == 0);
  }
  for (int i = 0; i < 3; ++i) {
    const std::string id = "r" + std::to_string(i);
    INFO(id);
    CHECK(outputs[1][id].size() == size_t(150 + 20 * i));
    CHECK(outputs[1][id] == outputs[0][id]);
  }
}

TEST_CASE("a sequence that leaves its window commits nothing more to the prefix cache", "[scheduler][stream]") {
  // A 200-token prompt through a 64-row window: its first chunk (64 tokens,
  // 4 blocks) is committed before any eviction; every later row sits at a
  // cache position that is not its text position and is never indexed.
  // Without the window the same prompt leaves 12 blocks in the cache.
  for (const uint32_t window : {64u, 0u}) {
    INFO("window " << window);
    StreamRig rig("kv.paged", window, window ? 16 : 0, 512, 1024, true, 64);
    const std::vector<int32_t> prompt = random_prompt(7, 200, rig.vocab());
    rig.sched->add_request("a", prompt, greedy(8));
    rig.run();
    const auto cached = rig.kv->cached_blocks();
    REQUIRE(cached.has_value());
    CHECK(cached->size() == (window ? 4u : 12u));
    // The same prompt again: hits only what was committed before the shift.
    rig.sched->add_request("b", prompt, greedy(8));
    rig.run();
    CHECK(rig.kv->cached_blocks()->size() == (window ? 4u : 12u));
    CHECK(rig.sched->stats().num_cached_prompt_tokens == (window ? 48u : 192u));
  }
}

TEST_CASE("streaming settings that cannot work are refused, naming the key", "[scheduler][stream][config]") {
  EngineConfig cfg;
  cfg.model.load_format = "dummy";
  cfg.model.preset = "llama-110m";
  cfg.kv_cache.sink_tokens = 4;
  CHECK_THROWS_WITH(validate(cfg), Contains("kv_cache.sink_tokens") && Contains("need kv_cache.window"));
  cfg.kv_cache.window = 4;
  CHECK_THROWS_WITH(validate(cfg), Contains("kv_cache.sink_tokens") && Contains("below kv_cache.window (4)"));
  cfg.kv_cache.sink_tokens = 0;
  cfg.kv_cache.window = 1;
  CHECK_THROWS_WITH(validate(cfg), Contains("kv_cache.window") && Contains("no room"));
  cfg.kv_cache.window = 256;
  cfg.parallel.tensor = 2;
  CHECK_THROWS_WITH(validate(cfg), Contains("kv_cache.window") && Contains("one process"));
  cfg.parallel.tensor = 1;
  CHECK_NOTHROW(validate(cfg));

  // Against the model: the context, and a model's own sliding window.
  ModelConfig model;
  model.max_position_embeddings = 4096;
  cfg.kv_cache.window = 8192;
  CHECK_THROWS_WITH(check_stream_window(cfg, model, 4096),
                    Contains("kv_cache.window (8192) exceeds the context length (4096)"));
  model.sliding_window = 1024;
  cfg.kv_cache.window = 2048;
  CHECK_THROWS_WITH(check_stream_window(cfg, model, 4096),
                    Contains("kv_cache.window (2048) exceeds the model's own sliding window (1024)"));
  cfg.kv_cache.window = 1024;
  CHECK_NOTHROW(check_stream_window(cfg, model, 4096));

  // Against the allocator and the scheduler's other features.
  using sched_test::FakePagedAllocator;
  FakePagedAllocator no_evict(64, 16);
  SchedulerOptions options;
  options.stream = StreamWindow{256, 4, 16};
  CHECK_THROWS_WITH(Scheduler(sched_test::scheduler_section(4, 64), SchedulerLimits{512, {}, 0}, no_evict, options),
                    Contains("kv_cache.window: 256") && Contains("evict_tokens"));
  PluginRegistry plugins;
  const llmk_kv_allocator_desc desc{sizeof(llmk_kv_allocator_desc), 1024, 16, 512, 0, "{}", nullptr, nullptr};
  KvAllocatorImpl paged(plugins.load("kv.paged", LLMK_PLUGIN_KV_ALLOCATOR), desc);
  CHECK_THROWS_WITH(Scheduler(sched_test::scheduler_section(4, 64), SchedulerLimits{512, {}, 0}, paged, options),
                    Contains("kv_cache.sink_tokens: 4 is not a multiple of the KV allocator's block size 16"));
  options.stream = StreamWindow{20, 8, 16};
  CHECK_THROWS_WITH(Scheduler(sched_test::scheduler_section(4, 64), SchedulerLimits{512, {}, 0}, paged, options),
                    Contains("kv_cache.window: 20") && Contains("at least their sum"));
  options.stream = StreamWindow{256, 16, 16};
  options.speculative.method = "ngram";
  CHECK_THROWS_WITH(Scheduler(sched_test::scheduler_section(4, 64), SchedulerLimits{512, {}, 0}, paged, options),
                    Contains("kv_cache.window: 256") && Contains("speculative"));
  options.speculative = SpeculativeSection{};
  CHECK_NOTHROW(Scheduler(sched_test::scheduler_section(4, 64), SchedulerLimits{512, {}, 0}, paged, options));
}
