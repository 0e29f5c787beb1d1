// The whole engine at every layout of the world size (rank 0 runs the
// actors and the scheduler; the other ranks serve its steps): a continuous
// batch of concurrent requests with chunked prefill and a KV cache small
// enough to preempt, for each KV allocator and both preemption modes
// (recompute; offload, which saves and restores every rank's share of the
// KV), gives the texts a degree-1 engine gives; so does speculative decoding
// with token trees.
#include <catch2/catch.hpp>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "tests/parallel/parallel_harness.hpp"
#include "tests/support/speculation_config.hpp"

using namespace llmk;
using namespace llmk::test;

namespace {

std::string shared() {
  const char* env = std::getenv("LLMK_SHARED_DIR");
  return env != nullptr && *env != '\0' ? env : LLMK_SHARED_DIR;
}

EngineConfig engine_config(uint32_t tensor, uint32_t pipeline, const std::string& allocator,
                           const std::string& preemption) {
  EngineConfig cfg;
  cfg.model.path = shared() + "/models/stories260K";
  cfg.executor.num_threads = 1;
  cfg.kv_cache.dtype = DType::f32;
  cfg.kv_cache.max_seq_len = 128;
  cfg.kv_cache.block_size = 16;
  // Eight requests of up to ~100 tokens in 320 slots: some wait, some are preempted.
  cfg.kv_cache.capacity_tokens = 320;
  cfg.plugins.kv_allocator = allocator;
  cfg.scheduler.max_num_batched_tokens = 24;  // prompts prefill in chunks
  cfg.scheduler.max_num_seqs = 8;
  cfg.scheduler.preemption = preemption;
  cfg.parallel.tensor = tensor;
  cfg.parallel.pipeline = pipeline;
  return cfg;
}

struct Outcome {
  std::map<std::string, std::string> texts;
  uint64_t preemptions = 0;
  uint64_t peak_steps_in_flight = 0;
  uint64_t spec_draft_tokens = 0;
  uint64_t spec_accepted_tokens = 0;
};

Outcome run_engine(const EngineConfig& cfg) {
  static const char* prompts[] = {"Once upon a time", "The little dog", "Lily and Tom went to the park",
                                  "One day, a big bird", "There was a girl who liked to sing", "The sun was hot",
                                  "A cat sat on the mat and", "Mom said"};
  Engine engine(cfg);
  std::vector<std::pair<std::string, std::unique_ptr<EventStream>>> streams;
  for (int i = 0; i < 8; ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    r.prompt = prompts[i];
    r.sampling.temperature = 0;
    r.sampling.max_tokens = 60 + 5 * i;
    r.sampling.ignore_eos = true;
    std::string id = r.id;
    streams.emplace_back(std::move(id), engine.submit(std::move(r)));
  }
  Outcome out;
  for (auto& [id, stream] : streams) {
    std::string text;
    while (auto ev = stream->next(std::chrono::minutes(5))) {
      text += ev->text_delta;
      if (ev->request_done) {
        if (ev->finish_reason == FinishReason::error) text += " [error: " + ev->error + "]";
        break;
      }
    }
    out.texts[id] = text;
  }
  const EngineStats stats = engine.stats();
  out.preemptions = stats.num_preemptions;
  out.peak_steps_in_flight = stats.peak_steps_in_flight;
  out.spec_draft_tokens = stats.num_spec_draft_tokens;
  out.spec_accepted_tokens = stats.num_spec_accepted_tokens;
  if (std::getenv("LLMK_TEST_VERBOSE"))
    for (const auto& [id, text] : out.texts) std::printf("%s: %s\n", id.c_str(), text.c_str());
  return out;
}

}  // namespace

TEST_CASE("a continuous batch with chunked prefill and preemption gives degree 1's texts", "[parallel][engine]") {
  // Two ranks run every allocator; four ranks (the deeper pipelines) the one
  // that fills them, kv.paged, to stay within a shared 2-core machine's time.
  const std::vector<std::string> allocators = harness_world().size() > 2
                                                  ? std::vector<std::string>{"kv.paged"}
                                                  : std::vector<std::string>{"kv.contiguous", "kv.paged", "kv.vm"};
  for (const std::string& allocator : allocators) {
    for (const std::string preemption : {"recompute", "offload"}) {
      EngineConfig one = engine_config(1, 1, allocator, preemption);
      const Outcome want = run_engine(one);
      for (const auto& [t, p] : layouts_for(harness_world().size())) {
        if (t * p == 1) continue;
        INFO(allocator << ", preemption " << preemption << ", tensor " << t << " x pipeline " << p);
        const EngineConfig cfg = engine_config(t, p, allocator, preemption);
        ParallelRun job(cfg);
        const Outcome got = run_engine(cfg);
        std::printf("%s, %s, tensor %u x pipeline %u: %d requests, %llu preemptions (degree 1: %llu), "
                    "up to %llu steps in flight\n",
                    allocator.c_str(), preemption.c_str(), t, p, static_cast<int>(got.texts.size()),
                    static_cast<unsigned long long>(got.preemptions), static_cast<unsigned long long>(want.preemptions),
                    static_cast<unsigned long long>(got.peak_steps_in_flight));
        // A pipeline keeps a step per stage in flight, the scheduler planning
        // them disjoint; kv.contiguous, reserving whole ranges, runs too few
        // sequences at once to fill four stages.
        if (p > 1) {
          CHECK(got.peak_steps_in_flight >= 2);
          CHECK(got.peak_steps_in_flight <= p);
          if (allocator != "kv.contiguous") CHECK(got.peak_steps_in_flight == p);
        }
        if (allocator != "kv.contiguous") CHECK(want.preemptions > 0);  // the workload does preempt (kv.contiguous
                                                                        // reserves whole ranges: requests wait instead)
        for (const auto& [id, text] : want.texts) {
          INFO(id);
          CHECK(got.texts.at(id) == text);
        }
      }
    }
  }
}

TEST_CASE("pipeline stages taking turns (parallel.steps_in_flight 1) give degree 1's texts", "[parallel][engine]") {
  const Outcome want = run_engine(engine_config(1, 1, "kv.paged", "recompute"));
  for (const auto& [t, p] : layouts_for(harness_world().size())) {
    if (p == 1) continue;
    INFO("tensor " << t << " x pipeline " << p);
    EngineConfig cfg = engine_config(t, p, "kv.paged", "recompute");
    cfg.parallel.steps_in_flight = 1;
    ParallelRun job(cfg);
    const Outcome got = run_engine(cfg);
    CHECK(got.peak_steps_in_flight == 1);
    for (const auto& [id, text] : want.texts) {
      INFO(id);
      CHECK(got.texts.at(id) == text);
    }
  }
}

TEST_CASE("token-tree speculation gives degree 1's texts, its steps' tree rows travelling to every rank",
          "[parallel][engine][speculative]") {
  // Prompt lookup drafting trees of width 3 (speculative.tree_width): every
  // rank's attention masks each tree row to its ancestors, so the greedy
  // texts are plain decoding's. Against chains (tree_width 1) of the same
  // layout, trees draft more tokens: the trees were verified as trees.
  auto speculating = [](const EngineConfig& base, uint32_t width) {
    EngineConfig cfg = with_ngram_speculation(base, width);
    cfg.kv_cache.capacity_tokens = 2048;  // no preemption: the drafts depend on the batch alone
    // Speculation verifies a step's drafts before the next is planned: a
    // pipeline's stages take turns.
    if (cfg.parallel.pipeline > 1) cfg.parallel.steps_in_flight = 1;
    return cfg;
  };
  const Outcome want = run_engine(engine_config(1, 1, "kv.paged", "recompute"));
  for (const auto& [t, p] : layouts_for(harness_world().size())) {
    if (t * p == 1) continue;
    INFO("tensor " << t << " x pipeline " << p);
    const EngineConfig base = engine_config(t, p, "kv.paged", "recompute");
    uint64_t chain_tokens = 0, tree_tokens = 0, tree_accepted = 0;
    for (uint32_t width : {1u, 3u}) {
      const EngineConfig cfg = speculating(base, width);
      ParallelRun job(cfg);
      const Outcome got = run_engine(cfg);
      (width == 1 ? chain_tokens : tree_tokens) = got.spec_draft_tokens;
      if (width > 1) tree_accepted = got.spec_accepted_tokens;
      for (const auto& [id, text] : want.texts) {
        INFO(id << ", tree_width " << width);
        CHECK(got.texts.at(id) == text);
      }
    }
    std::printf("tensor %u x pipeline %u: chains drafted %llu tokens, trees %llu (%llu accepted)\n", t, p,
                static_cast<unsigned long long>(chain_tokens), static_cast<unsigned long long>(tree_tokens),
                static_cast<unsigned long long>(tree_accepted));
    CHECK(tree_accepted > 0);
    CHECK(tree_tokens > chain_tokens);
  }
}
