// The draft-model proposer on stories260K: its drafts after any history
// (a rejected draft, a rewritten tail, a dropped cache) equal those of a
// fresh proposer that never saw the sequence before, so what it rolls back
// and recomputes is right; its cache holds the sequence and the first k - 1
// drafts, and nothing once the sequence is released.
#include <catch2/catch.hpp>

#include "core/checkpoint.hpp"
#include "core/draft_proposer.hpp"
#include "support/golden.hpp"

using namespace llmk;

namespace {

EngineConfig draft_config(const std::string& allocator) {
  EngineConfig cfg;
  cfg.model.path = llmk::test::stories_dir();
  cfg.executor.num_threads = 1;
  cfg.kv_cache.block_size = 8;
  cfg.plugins.kv_allocator = allocator;
  cfg.speculative.method = "draft";
  cfg.speculative.draft_model = cfg.model.path;
  cfg.speculative.num_tokens = 4;
  return cfg;
}

std::vector<int32_t> drafts(Proposer& p, uint64_t seq_id, const std::vector<int32_t>& tokens, int32_t k) {
  const DraftRequest r{seq_id, tokens, k, 256};
  std::vector<std::vector<int32_t>> out;
  p.propose({&r, 1}, out);
  REQUIRE(out.size() == 1);
  return out[0];
}

}  // namespace

TEST_CASE("a draft model's drafts after rejections and rewrites equal a fresh proposer's, under every allocator",
          "[speculation][draft]") {
  const std::string allocator = GENERATE(as<std::string>{}, "kv.paged", "kv.contiguous", "kv.vm");
  INFO(allocator);
  const EngineConfig cfg = draft_config(allocator);
  const auto target = open_model(cfg.model);
  PluginRegistry plugins;
  auto fresh = [&](const std::vector<int32_t>& tokens, int32_t k) {
    auto p = make_draft_proposer(cfg, *target, 1024, plugins);
    return drafts(*p, 1, tokens, k);
  };
  auto proposer = make_draft_proposer(cfg, *target, 1024, plugins);
  std::vector<int32_t> tokens = {1, 403, 407, 261, 378, 285, 300, 371};
  const std::vector<int32_t> first = drafts(*proposer, 7, tokens, 4);
  REQUIRE(first.size() == 4);
  CHECK(first == fresh(tokens, 4));
  CHECK(proposer->kv().usage().used_slots == tokens.size() + 3);

  // The target accepts the first draft and rejects the second: its own
  // choice (here another id) follows; the cache rolls back to the accepted.
  tokens.push_back(first[0]);
  tokens.push_back(first[1] == 300 ? 301 : 300);
  const std::vector<int32_t> second = drafts(*proposer, 7, tokens, 3);
  CHECK(second == fresh(tokens, 3));
  CHECK(proposer->kv().usage().used_slots == tokens.size() + 2);

  // Every draft accepted plus the bonus id: nothing to roll back.
  tokens.insert(tokens.end(), second.begin(), second.end());
  tokens.push_back(second.back());
  CHECK(drafts(*proposer, 7, tokens, 4) == fresh(tokens, 4));

  // A tail rewritten well before the end (as after a recompute with other
  // history), and a second sequence beside it in the same batch.
  tokens.resize(5);
  tokens.push_back(42);
  const std::vector<int32_t> other = {1, 300, 301, 302};
  const DraftRequest both[] = {{7, tokens, 2, 256}, {9, other, 4, 256}};
  std::vector<std::vector<int32_t>> out;
  proposer->propose(both, out);
  REQUIRE(out.size() == 2);
  CHECK(out[0] == fresh(tokens, 2));
  CHECK(out[1] == fresh(other, 4));
  CHECK(proposer->kv().usage().num_seqs == 2);
  proposer->release(7);
  proposer->release(9);
  CHECK(proposer->kv().usage().used_slots == 0);
  CHECK(proposer->kv().usage().num_seqs == 0);
}

TEST_CASE("a draft cache too small for every sequence drops idle ones, then goes without drafts", "[speculation][draft]") {
  const EngineConfig cfg = draft_config("kv.paged");
  const auto target = open_model(cfg.model);
  PluginRegistry plugins;
  auto proposer = make_draft_proposer(cfg, *target, 32, plugins);  // 4 blocks of 8
  const std::vector<int32_t> a = {1, 300, 301, 302, 303, 304, 305, 306, 307, 308};
  const std::vector<int32_t> b = {1, 310, 311, 312, 313, 314, 315, 316, 317, 318};
  CHECK(drafts(*proposer, 1, a, 4).size() == 4);  // 13 slots: 2 blocks
  CHECK(drafts(*proposer, 2, b, 4).size() == 4);  // 2 more blocks: full
  const std::vector<int32_t> c = {1, 320, 321, 322, 323, 324, 325, 326, 327, 328};
  CHECK(drafts(*proposer, 3, c, 4).size() == 4);  // 1 and 2 are dropped for it
  CHECK(proposer->num_evictions() == 2);
  std::vector<int32_t> long_one(40, 300);
  long_one[0] = 1;
  CHECK(drafts(*proposer, 4, long_one, 4).empty());  // more than the whole cache
  CHECK(proposer->kv().usage().num_seqs == 0);
}
