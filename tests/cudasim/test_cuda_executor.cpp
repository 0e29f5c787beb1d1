// The CUDA executor end to end under the simulation: stories260K through
// core/cuda/cuda_executor.cpp, linear.cublas and attention.cuda (both built
// against the simulation into tests/cudasim_plugins), against the float64
// golden vectors of ../shared/golden/stories260K.json.
//
// Tolerances, as the relative L2 error of the last position's logits:
//   F32 weights   1e-4 (the CPU executor's gate: f32 rounding through
//                 5 layers of GEMMs, norms and softmax)
//   BF16 weights  1e-2 (weights rounded to 8 significant bits, activations
//                 to bf16 at each GEMM input: about 2^-9 relative per
//                 rounding, accumulated over the layers; measured 2.2e-3 to
//                 4.2e-3 on the five prompts). Above 1e-4 as well: the F32
//                 path lands near 1e-6, so a BF16 run that stayed in F32
//                 would fail.
#include "test_support.hpp"

#if !defined(LLMK_CUDASIM_PLUGIN_DIR)
#include "support/skip.hpp"
TEST_CASE("the simulated CUDA executor needs the simulated plugins", "[cuda_executor]") {
  LLMK_SKIP("this build has no simulated CUDA plugins (tests/cudasim_plugins)");
}
#else
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/cuda/cuda_executor.hpp"
#include "core/cuda/cuda_sampler.hpp"
#include "core/plugin_loader.hpp"
#include "support/golden.hpp"

namespace {

using namespace llmk;

constexpr double kF32Tolerance = 1e-4;
constexpr double kBf16Tolerance = 1e-2;
constexpr double kBf16Floor = 1e-4;

using test::argmax;
using test::GoldenCase;
using test::rel_l2;

const std::vector<GoldenCase>& golden() { return test::golden_cases(); }

struct CudaFixture {
  std::shared_ptr<const Checkpoint> checkpoint =
      load_checkpoint(test::stories_dir());
  PluginRegistry plugins{{LLMK_CUDASIM_PLUGIN_DIR}};
  EngineConfig cfg;
  std::unique_ptr<Executor> executor;

  explicit CudaFixture(const std::string& weight_dtype = "f32", uint32_t step_tokens = 512,
                       DType kv_dtype = DType::f32, bool cuda_graphs = true,
                       const std::string& attention_options = "{}") {
    cudasim_test::reset_simulator(1);
    cfg.executor.device = "cuda";
    cfg.kv_cache.capacity_tokens = 1024;
    cfg.kv_cache.dtype = kv_dtype;
    cfg.executor.cuda_graphs = cuda_graphs;
    cfg.scheduler.max_num_batched_tokens = step_tokens;
    cfg.plugins.linear = "linear.cublas";
    cfg.plugins.linear_options = R"({"dtype":")" + weight_dtype + R"("})";
    cfg.plugins.attention = "attention.cuda";
    cfg.plugins.attention_options = attention_options;
    executor = make_cuda_executor(cfg, checkpoint, plugins);
  }

  // Runs one step and copies its logits rows back.
  std::vector<float> run(const StepBatch& b) {
    const LogitsView view = executor->execute(b);
    REQUIRE(view.device == Device::cuda);
    REQUIRE(view.num_rows == b.num_logits());
    if (view.ready.event != nullptr) CUDA_REQUIRE(cudaEventSynchronize(static_cast<cudaEvent_t>(view.ready.event)));
    std::vector<float> host(static_cast<size_t>(view.num_rows) * view.vocab_size);
    for (int32_t r = 0; r < view.num_rows; ++r)
      CUDA_REQUIRE(cudaMemcpy(host.data() + static_cast<size_t>(r) * view.vocab_size, view.row(r),
                              static_cast<size_t>(view.vocab_size) * sizeof(float), cudaMemcpyDeviceToHost));
    return host;
  }

  // One prefill of the whole prompt in slots [first_slot, ...), logits for every row.
  std::vector<float> prefill_all(const std::vector<int32_t>& ids, int32_t first_slot = 0) {
    StepBatch b;
    const int32_t n = static_cast<int32_t>(ids.size());
    b.token_ids = ids;
    for (int32_t i = 0; i < n; ++i)
      b.positions.push_back(i), b.slot_mapping.push_back(first_slot + i), b.logits_rows.push_back(i);
    b.query_start = {0, n};
    b.context_lens = {n};
    b.block_tables = {first_slot};
    b.max_blocks_per_seq = 1;
    b.block_size = 512;
    return run(b);
  }
};

// Sequences s = 0.. in their own 128-slot ranges: a prefill of each one's
// tokens together, logits for each last row.
StepBatch ranges_prefill(const std::vector<std::vector<int32_t>>& tokens) {
  StepBatch prefill;
  prefill.block_size = 128;
  prefill.max_blocks_per_seq = 1;
  prefill.query_start = {0};
  for (int32_t s = 0; s < static_cast<int32_t>(tokens.size()); ++s) {
    for (size_t p = 0; p < tokens[s].size(); ++p) {
      prefill.token_ids.push_back(tokens[s][p]);
      prefill.positions.push_back(static_cast<int32_t>(p));
      prefill.slot_mapping.push_back(128 * s + static_cast<int32_t>(p));
    }
    prefill.query_start.push_back(prefill.num_tokens());
    prefill.context_lens.push_back(static_cast<int32_t>(tokens[s].size()));
    prefill.block_tables.push_back(128 * s);
    prefill.logits_rows.push_back(prefill.num_tokens() - 1);
  }
  return prefill;
}

// The next decode of the first `live` of those sequences: each one's last token.
StepBatch ranges_decode(const std::vector<std::vector<int32_t>>& tokens, int32_t live) {
  StepBatch d;
  d.block_size = 128;
  d.max_blocks_per_seq = 1;
  d.query_start = {0};
  for (int32_t s = 0; s < live; ++s) {
    const auto pos = static_cast<int32_t>(tokens[s].size() - 1);
    d.token_ids.push_back(tokens[s].back());
    d.positions.push_back(pos);
    d.slot_mapping.push_back(128 * s + pos);
    d.query_start.push_back(s + 1);
    d.context_lens.push_back(pos + 1);
    d.block_tables.push_back(128 * s);
    d.logits_rows.push_back(s);
  }
  return d;
}

}  // namespace

TEST_CASE("stories260K through the simulated CUDA executor: every position's argmax and the last logits match "
          "float64, F32 weights",
          "[cuda_executor]") {
  CudaFixture f("f32");
  const int32_t vocab = f.executor->model_config().vocab_size;
  for (const GoldenCase& c : golden()) {
    const std::vector<float> logits = f.prefill_all(c.input_ids);
    for (size_t i = 0; i < c.input_ids.size(); ++i)
      CHECK(argmax(logits.data() + i * vocab, vocab) == c.all_positions_argmax[i]);
    CHECK(rel_l2(logits.data() + (c.input_ids.size() - 1) * vocab, c.last_logits) < kF32Tolerance);
  }
}

TEST_CASE("stories260K through the simulated CUDA executor: last logits within the BF16 tolerance of float64",
          "[cuda_executor]") {
  CudaFixture f("bf16");
  const int32_t vocab = f.executor->model_config().vocab_size;
  for (const GoldenCase& c : golden()) {
    const std::vector<float> logits = f.prefill_all(c.input_ids);
    const double err = rel_l2(logits.data() + (c.input_ids.size() - 1) * vocab, c.last_logits);
    INFO("relative L2 error " << err);
    CHECK(err < kBf16Tolerance);
    CHECK(err > kBf16Floor);
  }
}

// Test names keep ": " before column 70: Catch2's console reporter indents a
// wrapped name to its last ": " and aborts when that passes its width,
// losing the failure's message.
TEST_CASE("stories260K through the simulated CUDA executor with F16 and BF16 KV caches gives last logits "
          "within the cache dtype's tolerance of float64",
          "[cuda_executor]") {
  // K/V rounded once when stored: 11 significant bits for F16 (2^-12
  // relative), 8 for BF16 (2^-9); through softmax and five layers the logits
  // move by about that much (measured: F16 5e-5 to 6e-4, BF16 3e-4 to 4e-3).
  const std::pair<DType, double> cases[] = {{DType::f16, 2e-3}, {DType::bf16, 1e-2}};
  for (const auto& [kv, tolerance] : cases) {
    CudaFixture f("f32", 512, kv);
    const int32_t vocab = f.executor->model_config().vocab_size;
    for (const GoldenCase& c : golden()) {
      const std::vector<float> logits = f.prefill_all(c.input_ids);
      const double err = rel_l2(logits.data() + (c.input_ids.size() - 1) * vocab, c.last_logits);
      INFO("kv " << dtype_name(kv) << ": relative L2 error " << err);
      CHECK(err < tolerance);
      CHECK(err > 1e-6);  // the cache really rounded: the smallest error measured here is 5e-5
    }
  }
}

TEST_CASE("stories260K through the simulated CUDA executor with an I8 KV cache, keys rotated or not, gives "
          "the CPU executor's int8 logits, and within the int8 tolerance of float64",
          "[cuda_executor]") {
  // Both executors quantize the same K/V rows with the same scheme (the
  // CUDA writer is the CPU quantizer's twin), so their logits agree to f32
  // rounding, except where a K/V value computed in a different summation
  // order lands on the other side of a rounding boundary: one level (1/254
  // of its group's range) on that value. Against float64, the int8 cache
  // itself moves the logits: unrotated groups of 8 the most. Measured over
  // the five prompts and four configurations: 1.7e-7 to 1.6e-4 against the
  // CPU executor, 6e-4 to 3.9e-2 against float64.
  for (const bool rotate : {true, false})
    for (const uint32_t group : {8u, 4u}) {
      cudasim_test::reset_simulator(1);
      std::shared_ptr<const Checkpoint> checkpoint = load_checkpoint(test::stories_dir());
      EngineConfig cfg;
      cfg.kv_cache.capacity_tokens = 1024;
      cfg.kv_cache.dtype = DType::i8;
      cfg.kv_cache.group_size = group;
      cfg.kv_cache.rotate_keys = rotate;
      PluginRegistry cpu_plugins({LLMK_PLUGIN_BUILD_DIR});
      cfg.executor.num_threads = 1;
      const std::unique_ptr<Executor> cpu = make_executor(cfg, checkpoint, cpu_plugins);
      PluginRegistry cuda_plugins({LLMK_CUDASIM_PLUGIN_DIR});
      cfg.executor.device = "cuda";
      cfg.plugins.linear = "linear.cublas";
      cfg.plugins.attention = "attention.cuda";
      CudaFixture f;
      f.executor = make_cuda_executor(cfg, checkpoint, cuda_plugins);
      const int32_t vocab = f.executor->model_config().vocab_size;
      for (const GoldenCase& c : golden()) {
        const std::vector<float> logits = f.prefill_all(c.input_ids);
        StepBatch b;
        const auto n = static_cast<int32_t>(c.input_ids.size());
        b.token_ids = c.input_ids;
        for (int32_t i = 0; i < n; ++i) b.positions.push_back(i), b.slot_mapping.push_back(i), b.logits_rows.push_back(i);
        b.query_start = {0, n};
        b.context_lens = {n};
        b.block_tables = {0};
        b.max_blocks_per_seq = 1;
        b.block_size = 512;
        const LogitsView cpu_view = cpu->execute(b);
        REQUIRE(cpu_view.device == Device::cpu);
        const size_t last = static_cast<size_t>(n - 1) * vocab;
        const std::vector<double> cpu_last(cpu_view.data + last, cpu_view.data + last + vocab);
        const double vs_cpu = rel_l2(logits.data() + last, cpu_last);
        const double vs_golden = rel_l2(logits.data() + last, c.last_logits);
        INFO("group " << group << (rotate ? ", rotated keys" : "") << ": relative L2 error " << vs_golden
                      << " against float64, " << vs_cpu << " against the CPU executor");
        CHECK(vs_cpu < 1e-3);
        CHECK(vs_golden < 6e-2);
        CHECK(vs_golden > 1e-6);  // the cache really quantized
        CHECK(argmax(logits.data() + last, vocab) == argmax(cpu_view.data + last, vocab));
      }
    }
}

TEST_CASE("the simulated CUDA executor continues every golden prompt greedily, as one mixed, chunked, paged batch",
          "[cuda_executor]") {
  CudaFixture f("f32");
  const int32_t vocab = f.executor->model_config().vocab_size;
  const auto& cases = golden();
  const test::MixedBatchResult r = test::run_mixed_golden_batch([&](const StepBatch& b) { return f.run(b); }, vocab,
                                                                /*num_generated=*/12, /*block_size=*/7,
                                                                /*max_blocks=*/12, /*shuffle_seed=*/7);
  for (size_t s = 0; s < cases.size(); ++s) {
    INFO("sequence " << s);
    CHECK(rel_l2(r.last_prompt_logits[s].data(), cases[s].last_logits) < kF32Tolerance);
    CHECK(std::equal(r.generated[s].begin(), r.generated[s].end(), cases[s].greedy_ids.begin()));
  }
}

TEST_CASE("flash prefill on tensor cores through the simulated CUDA executor: mixed chunked batches within the "
          "BF16 operand tolerance of float64, for every cache dtype",
          "[cuda_executor]") {
  // attention_flash rounds q and the softmax weights to BF16 (F16 for an
  // F16 cache): a relative 2^-9 per rounding, as BF16 weights give
  // (kBf16Tolerance); the cache's own rounding comes on top. Measured on
  // the five prompts: F32 cache (flash forced) and BF16 1.5e-3 to 3.4e-3,
  // F16 5e-5 to 5.7e-4, I8 1.3e-3 to 2.4e-2. The F32 path (prefill
  // "paged") stays within kF32Tolerance, so a flash run that fell back to
  // it would show below the floor.
  const std::pair<DType, const char*> cases[] = {
      {DType::f32, R"({"prefill":"flash"})"}, {DType::bf16, "{}"}, {DType::f16, "{}"}, {DType::i8, R"({"prefill":"flash"})"}};
  for (const auto& [kv, options] : cases) {
    CudaFixture f("f32", 512, kv, true, options);
    const int32_t vocab = f.executor->model_config().vocab_size;
    const auto& golden_cases = golden();
    const test::MixedBatchResult r = test::run_mixed_golden_batch([&](const StepBatch& b) { return f.run(b); }, vocab,
                                                                  /*num_generated=*/6, /*block_size=*/16,
                                                                  /*max_blocks=*/6, /*shuffle_seed=*/3);
    for (size_t s = 0; s < golden_cases.size(); ++s) {
      const double err = rel_l2(r.last_prompt_logits[s].data(), golden_cases[s].last_logits);
      INFO("kv " << dtype_name(kv) << " options " << options << " sequence " << s << ": relative L2 error " << err);
      CHECK(err < (kv == DType::i8 ? 6e-2 : kBf16Tolerance));
      // An F32 cache through flash: BF16 operands, far above f32 rounding
      // (a one-token prompt is a decode, which flash does not serve).
      if (kv == DType::f32 && golden_cases[s].input_ids.size() > 1) CHECK(err > kBf16Floor);
    }
  }
}

TEST_CASE("attention.cuda refuses options it does not know, by name", "[cuda_executor]") {
  CHECK_THROWS_WITH(CudaFixture("f32", 512, DType::f32, true, R"({"prefil":"flash"})"),
                    Catch::Contains("attention.cuda has no option 'prefil'"));
  CHECK_THROWS_WITH(CudaFixture("f32", 512, DType::f32, true, R"({"prefill":"fast"})"),
                    Catch::Contains("prefill must be \"auto\", \"flash\" or \"paged\""));
}

TEST_CASE("the simulated CUDA executor and the CUDA sampler generate the golden greedy ids, only ids crossing back",
          "[cuda_executor]") {
  CudaFixture f("f32");
  auto sampler = make_cuda_sampler(f.executor->model_config().vocab_size);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  const auto& cases = golden();
  for (size_t c = 0; c < cases.size(); ++c) {
    INFO("prompt " << c);
    const uint64_t key = c + 1;
    sampler->open(key, greedy, 0, {}, 1);
    std::vector<int32_t> tokens = cases[c].input_ids, generated;
    int32_t done = 0;
    while (generated.size() < cases[c].greedy_ids.size()) {
      // A prefill of the prompt, then one decode per step, in slots 0.. of one block.
      StepBatch b;
      const auto n = static_cast<int32_t>(tokens.size());
      for (int32_t p = done; p < n; ++p) {
        b.token_ids.push_back(tokens[p]);
        b.positions.push_back(p);
        b.slot_mapping.push_back(p);
      }
      b.query_start = {0, n - done};
      b.context_lens = {n};
      b.block_tables = {0};
      b.max_blocks_per_seq = 1;
      b.block_size = 512;
      b.logits_rows = {n - done - 1};
      done = n;
      const LogitsView view = f.executor->execute(b);
      std::vector<SampledToken> out(1);
      const DeviceSampler::Row row{key, 0, static_cast<int32_t>(generated.size())};
      sampler->sample(view, {&row, 1}, out);
      generated.push_back(out[0].token_id);
      tokens.push_back(out[0].token_id);
    }
    sampler->release(key);
    CHECK(generated == cases[c].greedy_ids);
  }
}

TEST_CASE("decode steps replayed from CUDA graphs give byte-identical logits to eager execution", "[cuda_executor]") {
  CudaFixture graphs("f32", 512, DType::f32, true), eager("f32", 512, DType::f32, false);
  const int32_t vocab = graphs.executor->model_config().vocab_size;
  // Three prompts in their own 128-slot ranges, prefilled together (an eager step in both).
  const auto& cases = golden();
  std::vector<std::vector<int32_t>> tokens{cases[1].input_ids, cases[2].input_ids, cases[4].input_ids};
  const StepBatch prefill = ranges_prefill(tokens);
  std::vector<float> a = graphs.run(prefill), b = eager.run(prefill);
  REQUIRE(a == b);
  // Decodes: three sequences (bucket 4) for four steps, then two (bucket 2) for four.
  for (int step = 0; step < 8; ++step) {
    const int32_t live = step < 4 ? 3 : 2;
    for (int32_t s = 0; s < 3; ++s) tokens[s].push_back(argmax(b.data() + s * vocab, vocab));
    const StepBatch d = ranges_decode(tokens, live);
    a = graphs.run(d);
    b = eager.run(d);
    INFO("decode step " << step);
    REQUIRE(a.size() == b.size());
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    b.resize(3 * static_cast<size_t>(vocab));  // rows past `live` keep their old tokens unused
  }
  const CudaGraphStats with = cuda_graph_stats(*graphs.executor), without = cuda_graph_stats(*eager.executor);
  CHECK(with.graphs == 2);    // buckets 4 and 2
  CHECK(with.replays == 6);   // the first step of each bucket runs eagerly and is captured
  CHECK(without.replays == 0);
  CHECK(without.graphs == 0);
}

// The executor rewrites a step's pinned metadata only after the previous
// upload from it has run (its cudaEventSynchronize on the upload event). A
// caller that reads no step's logits before issuing the next (here: host ids
// known ahead; a sampler working on the stream gives the same order) leaves
// that upload queued, so the simulation's deferred streams report a hazard if
// the wait goes missing, in the eager path and before a graph's replay.
TEST_CASE("decode steps issued back to back, no wait between them, end in the same logits as steps waited on",
          "[cuda_executor][overlap]") {
  const bool graphs = GENERATE(false, true);
  INFO("cuda_graphs " << graphs);
  CudaFixture waited("f32", 512, DType::f32, false), ahead("f32", 512, DType::f32, graphs);
  const int32_t vocab = waited.executor->model_config().vocab_size;
  const auto& cases = golden();
  std::vector<std::vector<int32_t>> tokens{cases[1].input_ids, cases[2].input_ids, cases[4].input_ids};
  std::vector<StepBatch> steps{ranges_prefill(tokens)};
  std::vector<float> reference = waited.run(steps.back());
  for (int step = 0; step < 4; ++step) {  // bucket 4: captured once, then replayed
    for (int32_t s = 0; s < 3; ++s) tokens[s].push_back(argmax(reference.data() + s * vocab, vocab));
    steps.push_back(ranges_decode(tokens, 3));
    reference = waited.run(steps.back());
  }
  LogitsView view;
  for (const StepBatch& b : steps) view = ahead.executor->execute(b);
  CUDA_REQUIRE(cudaEventSynchronize(static_cast<cudaEvent_t>(view.ready.event)));
  std::vector<float> got(reference.size());
  CUDA_REQUIRE(cudaMemcpy(got.data(), view.data, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(std::memcmp(got.data(), reference.data(), got.size() * sizeof(float)) == 0);
#if !LLMK_CUDA_NATIVE
  CHECK(cudasim::hazards().empty());
#endif
  CHECK(cuda_graph_stats(*ahead.executor).replays == (graphs ? 3u : 0u));
}

TEST_CASE("steps planned ahead take the CUDA sampler's ids on the device: logits byte-identical to host ids, "
          "eager and replayed from graphs",
          "[cuda_executor][overlap]") {
  const bool graphs = GENERATE(false, true);
  INFO("cuda_graphs " << graphs);
  CudaFixture ahead("f32", 512, DType::f32, graphs), host("f32", 512, DType::f32, false);
  const int32_t vocab = ahead.executor->model_config().vocab_size;
  auto sampler = make_cuda_sampler(vocab);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  const auto& cases = golden();
  std::vector<std::vector<int32_t>> tokens{cases[1].input_ids, cases[2].input_ids, cases[4].input_ids};
  for (uint64_t key = 1; key <= 3; ++key) sampler->open(key, greedy, 0, {}, 1);
  const StepBatch prefill = ranges_prefill(tokens);
  std::vector<float> reference = host.run(prefill);
  LogitsView view = ahead.executor->execute(prefill);
  int32_t live = 3;
  std::vector<int32_t> generated(3, 0);
  for (int step = 0; step < 7; ++step) {
    INFO("decode step " << step);
    // The sampler takes the last step's logits and publishes its ids on the device.
    std::vector<DeviceSampler::Row> rows;
    for (int32_t s = 0; s < live; ++s) rows.push_back({static_cast<uint64_t>(s + 1), 0, generated[s]});
    std::vector<SampledToken> out(rows.size());
    SampledIds ids;
    sampler->sample(view, rows, out, [&](const SampledIds& enqueued) { ids = enqueued; });
    REQUIRE(ids.device == Device::cuda);
    REQUIRE(ids.count == live);
    for (int32_t s = 0; s < live; ++s) {
      CHECK(out[s].token_id == argmax(reference.data() + static_cast<size_t>(s) * vocab, vocab));
      tokens[s].push_back(out[s].token_id);
      generated[s] += 1;
    }
    if (step == 3) live = 2;  // bucket 4, then bucket 2
    // The next decode, planned ahead: token 0 in the batch, each row's
    // id fed back from its sampler row (listed last row first).
    const StepBatch known = ranges_decode(tokens, live);
    StepBatch fed = known;
    std::fill(fed.token_ids.begin(), fed.token_ids.end(), 0);
    for (int32_t s = live - 1; s >= 0; --s) fed.fed_back.push_back({s, s});
    reference = host.run(known);
    view = ahead.executor->execute(fed, ids);
    std::vector<float> got(static_cast<size_t>(live) * vocab);
    CUDA_REQUIRE(cudaEventSynchronize(static_cast<cudaEvent_t>(view.ready.event)));
    CUDA_REQUIRE(cudaMemcpy(got.data(), view.data, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(std::memcmp(got.data(), reference.data(), got.size() * sizeof(float)) == 0);
  }
  for (uint64_t key = 1; key <= 3; ++key) sampler->release(key);
  const CudaGraphStats stats = cuda_graph_stats(*ahead.executor);
  CHECK(stats.replays == (graphs ? 5u : 0u));  // the first step of each bucket is captured, the rest replayed
}

TEST_CASE("the simulated CUDA executor saves and restores a sequence's KV slots, and applies slot copies",
          "[cuda_executor]") {
  CudaFixture f("f32");
  const int32_t vocab = f.executor->model_config().vocab_size;
  const GoldenCase& c = golden()[3];
  const int32_t n = static_cast<int32_t>(c.input_ids.size());
  f.prefill_all(c.input_ids);
  std::vector<int32_t> slots(c.input_ids.size());
  std::iota(slots.begin(), slots.end(), 0);
  const std::vector<uint8_t> saved = f.executor->save_kv(slots);
  f.prefill_all(golden()[4].input_ids);  // overwrites slots 0..
  f.executor->restore_kv(slots, saved);

  // Decode the golden next token on top of the restored prompt, after a copy
  // of the whole prompt to slots 200.. (the allocator's copy-on-write shape).
  StepBatch b;
  b.kv_copies = {llmk_kv_copy{0, 200, n}};
  b.token_ids = {c.greedy_ids[0]};
  b.positions = {n};
  b.slot_mapping = {200 + n};
  b.query_start = {0, 1};
  b.context_lens = {n + 1};
  b.block_tables = {200};
  b.max_blocks_per_seq = 1;
  b.block_size = 512;
  b.logits_rows = {0};
  const std::vector<float> logits = f.run(b);
  CHECK(argmax(logits.data(), vocab) == c.greedy_ids[1]);

  CHECK_THROWS_WITH(f.executor->save_kv({1 << 20}), Catch::Contains("outside the cache"));
  CHECK_THROWS_WITH(f.executor->restore_kv(slots, std::vector<uint8_t>(3)), Catch::Contains("do not hold"));
}

TEST_CASE("the simulated CUDA executor configured with the CPU's plugins says which CUDA plugins to name",
          "[cuda_executor]") {
  cudasim_test::reset_simulator(1);
  std::shared_ptr<const Checkpoint> checkpoint = load_checkpoint(test::stories_dir());
  PluginRegistry plugins({LLMK_CUDASIM_PLUGIN_DIR, LLMK_PLUGIN_BUILD_DIR});
  EngineConfig cfg;
  cfg.executor.device = "cuda";
  cfg.kv_cache.capacity_tokens = 256;
  CHECK_THROWS_WITH(make_cuda_executor(cfg, checkpoint, plugins),
                    Catch::Contains("this plugin runs on the CPU, the desc names cuda") &&
                        Catch::Contains("executor.device=cuda needs a CUDA plugin in plugins.linear: linear.cublas"));
  cfg.plugins.linear = "linear.cublas";
  CHECK_THROWS_WITH(make_cuda_executor(cfg, checkpoint, plugins),
                    Catch::Contains("needs a CUDA plugin in plugins.attention: attention.cuda"));
}

TEST_CASE("the simulated CUDA executor refuses a malformed step with the CPU executor's message", "[cuda_executor]") {
  CudaFixture f("f32");
  StepBatch b;
  b.token_ids = {1 << 20};
  b.positions = {0};
  b.slot_mapping = {0};
  b.query_start = {0, 1};
  b.context_lens = {1};
  b.block_tables = {0};
  b.max_blocks_per_seq = 1;
  b.block_size = 512;
  b.logits_rows = {0};
  CHECK_THROWS_WITH(f.executor->execute(b), Catch::Contains("outside the vocabulary"));
}

#endif  // LLMK_CUDASIM_PLUGIN_DIR
