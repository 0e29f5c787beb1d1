// Prefill/decode disaggregation inside one process: a prefill engine
// (disaggregation.mode prefill) computes each golden prompt and its first
// token and leaves the prompt's K/V in its handoff box; a second engine
// starts from that handoff and decodes the rest. The decoded ids must be the
// float64 reference's greedy ids, and the text what one engine alone gives.
#include <catch2/catch.hpp>

#include <thread>

#include "core/kv_handoff.hpp"
#include "engine_fixture.hpp"

using namespace llmk;
using namespace llmk::test;

namespace {

// Waits for the prefill's handoff under `key` (it is put as the request ends).
KvHandoffResult take_handoff(KvHandoffBox& box, const std::string& key) {
  for (int i = 0; i < 2000; ++i) {
    if (auto r = box.take(key)) return *r;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  FAIL("no handoff under '" << key << "'");
  return {};
}

KvHandoffResult prefill(Engine& engine, const GoldenCase& g, const std::string& key) {
  Request r = golden_request(g, "prefill-" + key);
  r.sampling.max_tokens = 1;
  r.kv_export_key = key;
  const RequestResult result = run_one(engine, std::move(r));
  REQUIRE(result.sample().finish_reason == FinishReason::length);
  REQUIRE(result.sample().token_ids.size() == 1);
  return take_handoff(*engine.kv_handoffs(), key);
}

Request decode_request(const GoldenCase& g, std::shared_ptr<KvHandoff> handoff, const std::string& id) {
  Request r = golden_request(g, id);
  r.prompt_token_ids = handoff->prompt_tokens;
  r.kv_import = std::move(handoff);
  return r;
}

}  // namespace

TEST_CASE("A prefill engine hands each golden prompt's K/V to a decode engine, which continues greedily",
          "[handoff]") {
  const std::string allocator = GENERATE(std::string("kv.paged"), std::string("kv.contiguous"), std::string("kv.vm"));
  INFO("allocator " << allocator);
  EngineConfig prefill_cfg = stories_config();
  prefill_cfg.plugins.kv_allocator = allocator;
  prefill_cfg.disaggregation.mode = "prefill";
  EngineConfig decode_cfg = stories_config();
  decode_cfg.plugins.kv_allocator = allocator;
  decode_cfg.disaggregation.mode = "decode";
  Engine prefill_engine(prefill_cfg);
  Engine decode_engine(decode_cfg);
  Engine alone(stories_config());
  REQUIRE(prefill_engine.kv_handoffs() != nullptr);
  CHECK(decode_engine.kv_handoffs() == nullptr);

  const auto cases = load_golden();
  for (size_t i = 0; i < cases.size(); ++i) {
    const GoldenCase& g = cases[i];
    INFO("golden prompt " << i << ": " << g.prompt);
    const KvHandoffResult h = prefill(prefill_engine, g, "room-" + std::to_string(i));
    REQUIRE(h.error.empty());
    REQUIRE(h.handoff);
    CHECK(h.handoff->prompt_tokens == g.input_ids);
    CHECK(h.handoff->first_token == g.greedy_ids.front());
    CHECK(h.handoff->blocks.size() == (g.input_ids.size() + 15) / 16);

    const RequestResult out = run_one(decode_engine, decode_request(g, h.handoff, "decode-" + std::to_string(i)));
    CHECK(out.sample().error.empty());
    CHECK(out.sample().token_ids == g.greedy_ids);
    CHECK(out.sample().text == run_one(alone, golden_request(g, "alone-" + std::to_string(i))).sample().text);
    CHECK(out.sample().usage.prompt_tokens == static_cast<int32_t>(g.input_ids.size()));
    CHECK(out.sample().usage.completion_tokens == static_cast<int32_t>(g.greedy_ids.size()));
  }
  // The decode engine computed one token per generated token after the
  // first, never the prompts; the prefill engine kept nothing behind.
  const EngineStats d = decode_engine.stats();
  size_t generated_after_first = 0;
  for (const auto& g : cases) generated_after_first += g.greedy_ids.size() - 1;
  CHECK(d.num_prefill_tokens == 0);
  CHECK(d.num_generated_tokens == generated_after_first);
  CHECK(prefill_engine.kv_handoffs()->size() == 0);
}

TEST_CASE("Handed-off requests decode beside ordinary ones in one continuous batch", "[handoff]") {
  EngineConfig prefill_cfg = stories_config();
  prefill_cfg.disaggregation.mode = "prefill";
  Engine prefill_engine(prefill_cfg);
  Engine mixed(stories_config());
  const auto cases = load_golden();
  std::vector<std::shared_ptr<KvHandoff>> handoffs;
  for (size_t i = 0; i < cases.size(); ++i) {
    const KvHandoffResult h = prefill(prefill_engine, cases[i], "mix-" + std::to_string(i));
    REQUIRE(h.handoff);
    handoffs.push_back(h.handoff);
  }
  Collector collector;
  for (size_t i = 0; i < cases.size(); ++i) {
    mixed.submit(decode_request(cases[i], handoffs[i], "handed-" + std::to_string(i)), collector.callback());
    mixed.submit(golden_request(cases[i], "plain-" + std::to_string(i)), collector.callback());
  }
  REQUIRE(collector.wait_done(2 * cases.size(), std::chrono::seconds(60)));
  const auto results = collector.results();
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("golden prompt " << i);
    const auto& handed = results.at("handed-" + std::to_string(i));
    const auto& plain = results.at("plain-" + std::to_string(i));
    CHECK(handed.violations.empty());
    CHECK(handed.sample().token_ids == cases[i].greedy_ids);
    CHECK(plain.sample().token_ids == cases[i].greedy_ids);
  }
}

TEST_CASE("A handoff of another layout or prompt is refused with what differs", "[handoff]") {
  EngineConfig prefill_cfg = stories_config();
  prefill_cfg.disaggregation.mode = "prefill";
  Engine prefill_engine(prefill_cfg);
  const auto cases = load_golden();
  const GoldenCase& g = cases.front();
  const KvHandoffResult h = prefill(prefill_engine, g, "layout");
  REQUIRE(h.handoff);

  SECTION("another block size") {
    EngineConfig other = stories_config();
    other.kv_cache.block_size = 32;
    Engine decode(other);
    const RequestResult out = run_one(decode, decode_request(g, h.handoff, "other-block"));
    CHECK(out.sample().finish_reason == FinishReason::error);
    CHECK(out.sample().error_code == ErrorCode::invalid_argument);
    CHECK_THAT(out.sample().error, Catch::Contains("layout") && Catch::Contains("block=16") &&
                                       Catch::Contains("block=32"));
  }
  SECTION("another prompt") {
    Engine decode(stories_config());
    Request r = decode_request(g, h.handoff, "other-prompt");
    r.prompt_token_ids.back() = r.prompt_token_ids.back() == 1 ? 2 : 1;
    const RequestResult out = run_one(decode, std::move(r));
    CHECK(out.sample().finish_reason == FinishReason::error);
    CHECK_THAT(out.sample().error, Catch::Contains("another prompt"));
  }
  SECTION("a prefill on an engine that keeps no handoffs") {
    Engine plain(stories_config());
    Request r = golden_request(g, "no-box");
    r.kv_export_key = "nowhere";
    const RequestResult out = run_one(plain, std::move(r));
    CHECK(out.sample().finish_reason == FinishReason::error);
    CHECK_THAT(out.sample().error, Catch::Contains("disaggregation.mode"));
  }
}

TEST_CASE("A cancelled prefill leaves its reason, not K/V, for the decode side", "[handoff]") {
  EngineConfig cfg = stories_config();
  cfg.disaggregation.mode = "prefill";
  cfg.scheduler.max_num_seqs = 1;  // the second request waits behind the first
  Engine engine(cfg);
  const auto cases = load_golden();
  Collector collector;
  Request blocker = golden_request(cases.front(), "blocker");
  blocker.sampling.max_tokens = 200;
  engine.submit(std::move(blocker), collector.callback());
  Request r = golden_request(cases.back(), "waiting-prefill");
  r.sampling.max_tokens = 1;
  r.kv_export_key = "cancelled";
  engine.submit(std::move(r), collector.callback());
  CHECK(engine.cancel("waiting-prefill"));
  const KvHandoffResult h = take_handoff(*engine.kv_handoffs(), "cancelled");
  CHECK_FALSE(h.handoff);
  CHECK_THAT(h.error, Catch::Contains("waiting-prefill") && Catch::Contains("cancelled"));
  engine.cancel("blocker");
  REQUIRE(collector.wait_done(2, std::chrono::seconds(20)));
}

TEST_CASE("A decode engine that speculates (prompt lookup) continues a handoff with the same greedy ids",
          "[handoff][speculative]") {
  EngineConfig prefill_cfg = stories_config();
  prefill_cfg.disaggregation.mode = "prefill";
  EngineConfig decode_cfg = stories_config();
  decode_cfg.disaggregation.mode = "decode";
  decode_cfg.speculative.method = "ngram";
  Engine prefill_engine(prefill_cfg);
  Engine decode_engine(decode_cfg);
  const auto cases = load_golden();
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("golden prompt " << i);
    const KvHandoffResult h = prefill(prefill_engine, cases[i], "spec-" + std::to_string(i));
    REQUIRE(h.handoff);
    const RequestResult out = run_one(decode_engine, decode_request(cases[i], h.handoff, "spec-" + std::to_string(i)));
    CHECK(out.sample().token_ids == cases[i].greedy_ids);
  }
  // The golden continuations repeat themselves: prompt lookup drafted and
  // some drafts were accepted, so the handed-off sequences did speculate.
  const EngineStats st = decode_engine.stats();
  CHECK(st.num_spec_drafts > 0);
  CHECK(st.num_spec_accepted_tokens > 0);
}
