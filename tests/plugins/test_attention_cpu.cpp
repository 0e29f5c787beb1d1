// attention.cpu against a float64 reference: random paged block tables,
// block sizes 1, 7, 16 and one large block, GQA groups, mixed batches of
// prefill chunks and decodes, F32 and I8 caches.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_isa.hpp"
#include "plugins/api/llmk_attention.h"
#include "plugins/plugin_library.hpp"
#include "support/attention_check.hpp"
#include "support/skip.hpp"

namespace {

using llmk::test::PluginLibrary;
using Problem = llmk::test::AttentionProblem;

// attention.cpu's file at each CPU level this build made and this CPU runs,
// baseline first: the decode kernels differ per level (AVX2 and AVX-512).
const std::vector<std::string>& plugin_files() {
  static const std::vector<std::string> files = [] {
    std::vector<std::string> f{"llmk_attention_cpu"};
    for (const std::string& level : llmk::cpu_isa_levels_built())
      if (llmk::cpu_supports(llmk::cpu_isa_level(level))) f.push_back("llmk_attention_cpu." + level);
    return f;
  }();
  return files;
}

const llmk_attention_api& plugin_api(const std::string& file) {
  static std::map<std::string, std::unique_ptr<PluginLibrary>> libraries;
  auto& lib = libraries[file];
  if (!lib) lib = std::make_unique<PluginLibrary>(file);
  return lib->api<llmk_attention_api>();
}

// One step through attention.cpu against the float64 reference
// (tests/support/attention_check.hpp); returns the largest error.
double run_case(const Problem& p, uint32_t kv_dtype, uint32_t num_threads, uint64_t seed, uint32_t i8_group = 8,
                const std::string& file = "llmk_attention_cpu") {
  const auto r = llmk::test::check_attention_step(plugin_api(file), p, kv_dtype, num_threads, seed, i8_group);
  INFO(r.why);
  REQUIRE(r.supported);
  CHECK(r.cache_ok);
  return r.max_err;
}

}  // namespace

TEST_CASE("attention.cpu matches a float64 reference for mixed prefill and decode batches over paged tables",
          "[attention]") {
  const uint32_t block_size = GENERATE(1u, 7u, 16u, 4096u);
  const uint32_t threads = GENERATE(1u, 2u);
  // Sequences: a fresh prefill, a prefill chunk on a cached prefix, decodes
  // at short and long contexts, one crossing several 64-key chunks.
  Problem p{8, 2, 40, block_size, {13, 5, 1, 1, 70}, {13, 29, 1, 150, 200}};
  INFO("block_size " << block_size << ", threads " << threads);
  CHECK(run_case(p, LLMK_DTYPE_F32, threads, 11 + block_size) < 2e-5);
}

TEST_CASE("attention.cpu's register-tiled prefill kernel matches the reference for head sizes 16 to 128",
          "[attention]") {
  const uint32_t head_dim = GENERATE(16u, 48u, 64u, 80u, 128u);
  const uint32_t block_size = GENERATE(1u, 16u);
  // Long prefill chunks (tiled: >= 12 rows per item) beside decodes (row-by-row).
  Problem p{8, 2, head_dim, block_size, {100, 1, 37, 20}, {100, 90, 170, 20}};
  INFO("head_dim " << head_dim << ", block_size " << block_size);
  CHECK(run_case(p, LLMK_DTYPE_F32, 2, 3 + head_dim) < 2e-5);
}

TEST_CASE("attention.cpu's decode kernel matches the reference for head sizes 16 to 256, MHA and GQA",
          "[attention]") {
  const uint32_t head_dim = GENERATE(16u, 64u, 80u, 128u, 256u);
  const uint32_t block_size = GENERATE(1u, 7u, 16u);
  // Contexts at and around the 16-position tile edges and across many tiles.
  const std::vector<int32_t> ctx{1, 15, 16, 17, 33, 150, 64, 2};
  Problem gqa{8, 2, head_dim, block_size, std::vector<int32_t>(ctx.size(), 1), ctx};
  Problem mha{4, 4, head_dim, block_size, std::vector<int32_t>(ctx.size(), 1), ctx};
  // One sequence alone: its KV heads are split across threads. The batches
  // of eight give each thread whole sequences, read as whole rows.
  Problem alone{6, 3, head_dim, block_size, {1}, {77}};
  for (const std::string& file : plugin_files()) {
    INFO("head_dim " << head_dim << ", block_size " << block_size << ", " << file);
    CHECK(run_case(gqa, LLMK_DTYPE_F32, 2, 21 + head_dim, 8, file) < 2e-5);
    CHECK(run_case(mha, LLMK_DTYPE_F32, 1, 22 + head_dim, 8, file) < 2e-5);
    CHECK(run_case(alone, LLMK_DTYPE_F32, 2, 23 + head_dim, 8, file) < 2e-5);
    CHECK(run_case(gqa, LLMK_DTYPE_I8, 2, 24 + head_dim, 8, file) < 2e-5);
    CHECK(run_case(alone, LLMK_DTYPE_I8, 2, 25 + head_dim, 8, file) < 2e-5);
    CHECK(run_case(gqa, LLMK_DTYPE_F16, 2, 26 + head_dim, 8, file) < 2e-5);
    CHECK(run_case(mha, LLMK_DTYPE_F16, 1, 27 + head_dim, 8, file) < 2e-5);
  }
}

TEST_CASE("attention.cpu cuts long decode contexts into 256-position spans and merges them to the reference",
          "[attention]") {
  // Head sizes with 2 threads, and 64 on 1 and 3 (the spans spread over
  // the threads by position; the bits do not depend on how: next test case).
  const auto [head_dim, threads] = GENERATE(table<uint32_t, uint32_t>({{16, 2}, {128, 2}, {64, 1}, {64, 3}}));
  // The sanitized suite runs two rows: the small head on two threads and
  // the spans spread over three (155 s for all four under ASan on two cores).
  if (llmk::test::in_sanitized_suite() && (head_dim == 128 || threads == 1)) return;
  // Whole up to 2048 visible positions, cut past it: at and around the
  // span edges, and decodes beside a prefill chunk.
  const std::vector<int32_t> ctx{2048, 2049, 2305, 2600};
  Problem gqa{4, 2, head_dim, 7, std::vector<int32_t>(ctx.size(), 1), ctx};
  Problem mha{4, 4, head_dim, 16, {1, 1, 30}, {2100, 30, 40}};
  Problem alone{3, 3, head_dim, 16, {1}, {2500}};
  INFO("head_dim " << head_dim << ", threads " << threads);
  CHECK(run_case(gqa, LLMK_DTYPE_F32, threads, 41 + head_dim) < 2e-5);
  CHECK(run_case(mha, LLMK_DTYPE_F32, threads, 42 + head_dim) < 2e-5);
  CHECK(run_case(alone, LLMK_DTYPE_F32, threads, 43 + head_dim) < 2e-5);
  CHECK(run_case(alone, LLMK_DTYPE_F16, threads, 44 + head_dim) < 2e-5);
  CHECK(run_case(gqa, LLMK_DTYPE_I8, threads, 45 + head_dim) < 2e-5);
  // Sliding windows longer than 2048 that start inside a span or one
  // position before an edge, one of exactly 2048 (whole), and short ones.
  for (const auto& [window, context] : std::vector<std::pair<uint32_t, int32_t>>{
           {2100, 2300}, {2049, 2561}, {2048, 2100}, {1, 2100}}) {
    INFO("window " << window << ", context " << context);
    Problem windowed{4, 2, head_dim, 16, {1, 1}, {context, context + 5}, window};
    CHECK(run_case(windowed, LLMK_DTYPE_F32, threads, 46 + window) < 2e-5);
  }
}

TEST_CASE("attention.cpu keeps attention sinks visible and scores them with q_sink, on every path and level",
          "[attention][sinks]") {
  // StreamingLLM (API 3.2): the reference sees positions [0, sinks) through
  // the step's q_sink rows and the rest (or a sliding window of it) through
  // q. Prefill chunks on a cached prefix, decodes at tile and span edges and
  // past the span threshold, a prefill shorter than the sinks.
  const auto [head_dim, threads] = GENERATE(table<uint32_t, uint32_t>({{64, 2}, {40, 1}}));
  const uint32_t sinks = GENERATE(4u, 17u);
  const uint32_t window = GENERATE(0u, 9u, 300u);
  // The sanitized suite runs the first row only (the kernels' paths are the
  // same on either; 81 s for both under ASan on two cores).
  if (llmk::test::in_sanitized_suite() && head_dim != 64) return;
  Problem p{8, 2, head_dim, 16, {13, 70, 1, 1, 1, 3}, {13, 200, 17, 600, 2049, 3}, window};
  p.sink_tokens = sinks;
  for (const std::string& file : plugin_files()) {
    INFO("head_dim " << head_dim << ", threads " << threads << ", sinks " << sinks << ", window " << window << ", "
                     << file);
    CHECK(run_case(p, LLMK_DTYPE_F32, threads, 61 + head_dim + sinks, 8, file) < 2e-5);
    CHECK(run_case(p, LLMK_DTYPE_F16, threads, 62 + head_dim + sinks, 8, file) < 2e-5);
    CHECK(run_case(p, LLMK_DTYPE_I8, threads, 63 + head_dim + sinks, 8, file) < 2e-5);
  }
}

TEST_CASE("attention.cpu gives a decode the same bits alone, in any batch and on any number of threads",
          "[attention]") {
  // Spans are cut at fixed positions and KV heads are never split within a
  // head, so a sequence's output does not depend on what runs beside it.
  // Whole-row and per-head tiles give the same bits: at 40 positions the
  // sequence alone is split by KV head on every thread count, while among
  // eight decodes it takes whole rows on one and two threads; at 2100
  // positions its spans take whole rows up to nine threads, and are split by
  // KV head on ten.
  const uint32_t kv_dtype = GENERATE(static_cast<uint32_t>(LLMK_DTYPE_F32), static_cast<uint32_t>(LLMK_DTYPE_F16),
                                     static_cast<uint32_t>(LLMK_DTYPE_I8));
  const uint32_t context = GENERATE(40u, 2100u);
  const std::string file = GENERATE_COPY(from_range(plugin_files()));
  // The sanitized suite runs the F16 cache only: how work is cut does not
  // depend on the cache type, and the other two types' kernels are
  // sanitized by the span and sink cases (142 s for all three under ASan).
  if (llmk::test::in_sanitized_suite() && kv_dtype != LLMK_DTYPE_F16) return;
  INFO("kv dtype " << kv_dtype << ", context " << context << ", " << file);
  const auto& api = plugin_api(file);
  const int32_t c = static_cast<int32_t>(context);
  const Problem alone{8, 2, 64, 16, {1}, {c}};
  const Problem batch{8, 2, 64, 16, {1, 40, 1, 1}, {c, 100, 700, 5}};
  const Problem decodes{8, 2, 64, 16, {1, 1, 1, 1, 1, 1, 1, 1}, {c, 100, 70, 5, 33, 64, 17, 2}};
  const size_t row = 8 * 64;  // the first sequence's output row
  const auto reference = llmk::test::check_attention_step(api, alone, kv_dtype, 1, 77);
  REQUIRE(reference.out.size() == row);
  CHECK(reference.max_err < 2e-5);
  for (uint32_t threads : {1u, 2u, 3u, 10u}) {
    for (const Problem* p : {&alone, &batch, &decodes}) {
      if (threads == 10 && (context != 2100 || p != &alone)) continue;  // ten threads on a small machine are slow
      const auto r = llmk::test::check_attention_step(api, *p, kv_dtype, threads, 77);
      INFO("threads " << threads << ", " << p->new_tokens.size() << " sequences");
      REQUIRE(r.out.size() >= row);
      CHECK(r.max_err < 2e-5);
      CHECK(std::equal(reference.out.begin(), reference.out.end(), r.out.begin()));
    }
  }
}

TEST_CASE("attention.cpu reads int8 caches of any group size dividing head_dim against the reference", "[attention]") {
  // Groups of 1 to a whole head, and groups that straddle two 16-value vectors.
  const std::vector<int32_t> ctx{1, 16, 17, 150};
  for (const auto& [head_dim, group] : std::vector<std::pair<uint32_t, uint32_t>>{
           {64, 1}, {64, 2}, {64, 4}, {64, 8}, {64, 16}, {64, 32}, {64, 64}, {48, 24}, {48, 3}, {128, 8}, {256, 16}}) {
    INFO("head_dim " << head_dim << ", group " << group);
    Problem gqa{8, 2, head_dim, 16, std::vector<int32_t>(ctx.size(), 1), ctx};
    CHECK(run_case(gqa, LLMK_DTYPE_I8, 2, 31 + head_dim + group, group) < 2e-5);
  }
}

TEST_CASE("attention.cpu with an F16 cache matches the reference over the stored halves", "[attention]") {
  // Prefill chunks (tiled and row-by-row paths) and decodes, head sizes the
  // decode kernel serves and one it does not.
  const uint32_t head_dim = GENERATE(17u, 64u);
  Problem p{8, 4, head_dim, 16, {9, 1, 1, 40}, {40, 77, 1, 40}};
  CHECK(run_case(p, LLMK_DTYPE_F16, 2, 31 + head_dim) < 2e-5);
}

TEST_CASE("attention.cpu serves multi-head (no GQA) and single-KV-head layouts with odd head sizes", "[attention]") {
  Problem mha{5, 5, 17, 7, {3, 1, 9}, {3, 66, 20}};
  CHECK(run_case(mha, LLMK_DTYPE_F32, 2, 5) < 2e-5);
  Problem mqa{6, 1, 128, 16, {1, 100}, {300, 100}};
  CHECK(run_case(mqa, LLMK_DTYPE_F32, 2, 6) < 2e-5);
}

TEST_CASE("attention.cpu with an int8 cache matches the reference over the dequantized cache", "[attention]") {
  Problem p{8, 4, 64, 16, {9, 1, 1}, {40, 77, 1}};
  CHECK(run_case(p, LLMK_DTYPE_I8, 2, 9) < 2e-5);
}

TEST_CASE("attention.cpu refuses configurations it cannot serve, with a reason", "[attention]") {
  PluginLibrary lib("llmk_attention_cpu");
  const auto& api = lib.api<llmk_attention_api>();
  CHECK(std::string(lib.info().name) == "attention.cpu");
  char why[256] = {};
  llmk_attention_desc d{sizeof(llmk_attention_desc), 6, 4, 64, 0.125f, LLMK_DTYPE_F32, 0, 128, 16, 1, "{}", 0,
                        LLMK_DEVICE_CPU, LLMK_DTYPE_F32, 4, 16, 0};
  CHECK(api.supports(&d, why, sizeof(why)) == 0);
  CHECK(std::string(why).find("divide") != std::string::npos);
  d.device = LLMK_DEVICE_CUDA;
  d.num_kv_heads = 2;
  CHECK(api.supports(&d, why, sizeof(why)) == 0);
  CHECK(std::string(why).find("this plugin runs on the CPU, the desc names cuda") != std::string::npos);
  d.device = LLMK_DEVICE_CPU;
  d.activation_dtype = LLMK_DTYPE_BF16;
  CHECK(api.supports(&d, why, sizeof(why)) == 0);
  CHECK(std::string(why).find("activation dtype") != std::string::npos);
  d.activation_dtype = LLMK_DTYPE_F32;
  d.num_kv_heads = 4;
  d.num_kv_heads = 2;
  d.kv_dtype = LLMK_DTYPE_BF16;
  CHECK(api.supports(&d, why, sizeof(why)) == 0);
  CHECK(std::string(why).find("kv_dtype") != std::string::npos);
  d.kv_dtype = LLMK_DTYPE_I8;
  d.kv_group_size = 7;
  CHECK(api.supports(&d, why, sizeof(why)) == 0);
  d.kv_group_size = 8;
  CHECK(api.supports(&d, why, sizeof(why)) == 1);
}

TEST_CASE("attention.cpu rejects a block table that points outside the cache when it plans the step",
          "[attention]") {
  PluginLibrary lib("llmk_attention_cpu");
  const auto& api = lib.api<llmk_attention_api>();
  llmk_attention_desc d{sizeof(llmk_attention_desc), 2, 1, 16, 0.25f, LLMK_DTYPE_F32, 0, 64, 16, 1, "{}", 0,
                        LLMK_DEVICE_CPU, LLMK_DTYPE_F32, 1, 4, 0};
  llmk_error err{};
  void* self = api.create(&d, &err);
  REQUIRE(self);
  std::vector<int32_t> qs{0, 1}, ctx{3}, slots{2}, table{6};  // block of 4 starting at slot 6: past 8 slots
  const llmk_attention_step step{sizeof(llmk_attention_step), 1, 1, 1, 4, 8, qs.data(), ctx.data(), slots.data(),
                                 table.data(), qs.data(), ctx.data(), slots.data(), table.data(), nullptr, nullptr};
  size_t bytes = 0;
  CHECK(api.plan(self, &step, &bytes, &err) == LLMK_ERR_INVALID_ARGUMENT);
  CHECK(std::string(err.message).find("outside") != std::string::npos);
  api.destroy(self);
}

TEST_CASE("attention.cpu declares the standard KV layout and holds run() to its plan and workspace",
          "[attention]") {
  PluginLibrary lib("llmk_attention_cpu");
  const auto& api = lib.api<llmk_attention_api>();
  // I8, group 8: 1 byte per element plus one float scale per 8 elements.
  llmk_attention_desc d{sizeof(llmk_attention_desc), 4, 2, 16, 0.25f, LLMK_DTYPE_I8, 8, 64, 16, 2, "{}", 0,
                        LLMK_DEVICE_CPU, LLMK_DTYPE_F32, 1, 4, 0};
  llmk_error err{};
  void* self = api.create(&d, &err);
  REQUIRE(self);
  llmk_kv_layout layout{};
  REQUIRE(api.kv_layout(self, &layout, &err) == LLMK_OK);
  CHECK(layout.kind == LLMK_KV_LAYOUT_STANDARD);
  CHECK(layout.k_bytes_per_slot == 2 * 16);
  CHECK(layout.v_bytes_per_slot == 2 * 16);
  CHECK(layout.k_scale_bytes_per_slot == 2 * 16 / 8 * 4);
  CHECK(layout.v_scale_bytes_per_slot == 2 * 16 / 8 * 4);

  std::vector<float> q(4 * 16, 1.0f), k(2 * 16, 1.0f), v(2 * 16, 1.0f), out(4 * 16), ks(8 * 4), vs(8 * 4);
  std::vector<int8_t> kc(8 * 32), vc(8 * 32);
  const llmk_attention_layer layer{sizeof(llmk_attention_layer), q.data(), k.data(), v.data(), out.data(),
                                   {kc.data(), vc.data(), ks.data(), vs.data(), 8}, nullptr};
  // No plan yet: run() refuses.
  CHECK(api.run(self, &layer, nullptr, 0, nullptr, &err) == LLMK_ERR_INVALID_ARGUMENT);
  std::vector<int32_t> qs{0, 1}, ctx{1}, slots{0}, table{0};
  const llmk_attention_step step{sizeof(llmk_attention_step), 1, 1, 1, 4, 8, qs.data(), ctx.data(), slots.data(),
                                 table.data(), qs.data(), ctx.data(), slots.data(), table.data(), nullptr, nullptr};
  size_t bytes = 0;
  REQUIRE(api.plan(self, &step, &bytes, &err) == LLMK_OK);
  REQUIRE(bytes > 0);
  llmk::AlignedBuffer workspace(bytes);
  CHECK(api.run(self, &layer, workspace.data(), bytes - 1, nullptr, &err) == LLMK_ERR_INVALID_ARGUMENT);
  CHECK(std::string(err.message).find("workspace") != std::string::npos);
  REQUIRE(api.run(self, &layer, workspace.data(), bytes, nullptr, &err) == LLMK_OK);
  // One key, itself: the output is its value row, 1.0 within the int8 step.
  for (float x : out) CHECK(std::fabs(x - 1.0f) < 1e-2f);
  // A layer whose cache is not the one planned for is refused.
  llmk_attention_layer other = layer;
  other.kv.num_slots = 4;
  CHECK(api.run(self, &other, workspace.data(), bytes, nullptr, &err) == LLMK_ERR_INVALID_ARGUMENT);
  api.destroy(self);
}

TEST_CASE("attention.cpu masks a token tree's rows to their ancestors, on every path, cache type and level",
          "[attention][tree]") {
  // API 3.3: a speculating decode's newest token and its draft tree beside a
  // prefill chunk, a decode and a causal chunk. Trees: a branching one, a
  // wide one of 40 nodes (several query blocks), a chain sent as a tree, and
  // trees on contexts shorter than the sinks and the window.
  const auto [head_dim, threads, block_size] =
      GENERATE(table<uint32_t, uint32_t, uint32_t>({{64, 2, 16}, {40, 1, 7}, {64, 1, 1}}));
  const uint32_t window = GENERATE(0u, 5u, 300u);
  const uint32_t sinks = GENERATE(0u, 4u);
  std::vector<int32_t> wide{-1};
  for (int32_t t = 1; t < 40; ++t) wide.push_back(t < 6 ? 0 : t % 3 == 0 ? (t - 1) / 3 : t / 2);
  Problem p{8, 2, head_dim, block_size, {9, 13, 1, 40, 5, 6, 3}, {60, 13, 77, 140, 5, 9, 300}, window};
  p.sink_tokens = sinks;
  p.tree_parents = {{-1, 0, 0, 1, 1, 2, 3, 5, 5}, {}, {}, wide, {-1, 0, 1, 2, 3}, {-1, 0, 0, 0, 2, 4}, {}};
  for (const std::string& file : plugin_files()) {
    INFO("head_dim " << head_dim << ", threads " << threads << ", block " << block_size << ", window " << window
                     << ", sinks " << sinks << ", " << file);
    CHECK(run_case(p, LLMK_DTYPE_F32, threads, 81 + head_dim, 8, file) < 2e-5);
    CHECK(run_case(p, LLMK_DTYPE_F16, threads, 82 + head_dim, 8, file) < 2e-5);
    CHECK(run_case(p, LLMK_DTYPE_I8, threads, 83 + head_dim, 8, file) < 2e-5);
  }
}

TEST_CASE("attention.cpu refuses tree parents that do not point to an earlier new token of the sequence",
          "[attention][tree]") {
  Problem p{4, 2, 16, 16, {3, 4}, {10, 4}};
  p.tree_parents = {{-1, 0, 0}, {-1, 0, 2, 1}};  // the second sequence's token 2 names itself
  const auto r = llmk::test::check_attention_step(plugin_api("llmk_attention_cpu"), p, LLMK_DTYPE_F32, 1, 5);
  CHECK(r.max_err == std::numeric_limits<double>::infinity());
  CHECK_THAT(r.why, Catch::Contains("tree_parents[5] = 2 of sequence 1"));
}
