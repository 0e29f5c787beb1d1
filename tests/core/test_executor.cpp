// The Executor seam on the CPU: make_executor picks the device the config
// names and refuses one that is not built; a CPU executor's logits view
// holds, byte for byte, what the Model writes for the same steps (and its
// argmax the float64 golden reference's); the view stays valid until the
// next execute(); saved KV slots restore through the executor.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/cpu_executor.hpp"
#include "core/error.hpp"
#include "core/executor.hpp"
#include "core/model.hpp"
#include "support/golden.hpp"

namespace {

using namespace llmk;
using Catch::Contains;

using llmk::test::golden_cases;
using GoldenPrompt = llmk::test::GoldenCase;

std::shared_ptr<const Checkpoint> stories_checkpoint() { return load_checkpoint(llmk::test::stories_dir()); }

EngineConfig small_config() {
  EngineConfig cfg;
  cfg.executor.num_threads = 2;
  cfg.kv_cache.capacity_tokens = 1024;
  cfg.scheduler.max_num_batched_tokens = 256;
  return cfg;
}

// One sequence at [first, first + ids.size()) of a contiguous range from slot
// `base`, logits for every new row when all_rows, else the last one.
StepBatch contiguous_step(const std::vector<int32_t>& ids, int32_t first, int32_t base, bool all_rows) {
  StepBatch b;
  const int32_t n = static_cast<int32_t>(ids.size());
  b.token_ids = ids;
  for (int32_t i = 0; i < n; ++i) {
    b.positions.push_back(first + i);
    b.slot_mapping.push_back(base + first + i);
    if (all_rows) b.logits_rows.push_back(i);
  }
  if (!all_rows) b.logits_rows = {n - 1};
  b.query_start = {0, n};
  b.context_lens = {first + n};
  b.block_tables = {base};
  b.max_blocks_per_seq = 1;
  b.block_size = 512;
  return b;
}

int32_t argmax(const float* x, int32_t n) { return static_cast<int32_t>(std::max_element(x, x + n) - x); }

}  // namespace

TEST_CASE("make_executor builds the CPU executor the config names, and refuses a device that is not built",
          "[executor]") {
  const std::shared_ptr<const Checkpoint> checkpoint = stories_checkpoint();
  PluginRegistry plugins{{LLMK_PLUGIN_BUILD_DIR}};
  EngineConfig cfg = small_config();
  const auto executor = make_executor(cfg, checkpoint, plugins);
  CHECK(executor->device() == Device::cpu);
  CHECK(dynamic_cast<CpuExecutor*>(executor.get()) != nullptr);
  CHECK(executor->runtime().num_kv_slots == 1024);
  CHECK(executor->runtime().num_threads == 2);
  CHECK(executor->model_config().vocab_size == checkpoint->config().vocab_size);
  // KV bytes: every layer's K and V for every slot, in f32.
  const ModelConfig& mc = checkpoint->config();
  CHECK(executor->kv_cache_bytes() ==
        static_cast<size_t>(mc.num_layers) * 2 * 1024 * static_cast<size_t>(mc.num_kv_heads * mc.head_dim) * 4);
  CHECK(executor->weight_bytes() > 0);

  cfg.executor.device = "cuda";
  if (has_executor("cuda")) return;  // a build with a CUDA executor tests it elsewhere
  try {
    make_executor(cfg, checkpoint, plugins);
    FAIL("a device with no executor was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_config);
    CHECK_THAT(e.what(), Contains("'cuda' has no executor in this build (built: cpu)"));
  }
}

TEST_CASE("a CPU executor's logits view holds exactly the Model's logits, argmax as the float64 reference",
          "[executor][golden]") {
  const std::shared_ptr<const Checkpoint> checkpoint = stories_checkpoint();
  PluginRegistry plugins{{LLMK_PLUGIN_BUILD_DIR}};
  const EngineConfig cfg = small_config();
  const auto executor = make_executor(cfg, checkpoint, plugins);
  Model model(checkpoint, plugins, cfg, resolve_runtime(cfg, *checkpoint));
  const int32_t vocab = model.config().vocab_size;
  for (const GoldenPrompt& c : golden_cases()) {
    const int32_t n = static_cast<int32_t>(c.input_ids.size());
    // Prefill with logits for every row, then decode the golden next token.
    const StepBatch prefill = contiguous_step(c.input_ids, 0, 0, true);
    const StepBatch decode = contiguous_step({c.greedy_ids[0]}, n, 0, false);
    for (const StepBatch* step : {&prefill, &decode}) {
      std::vector<float> expected(static_cast<size_t>(step->num_logits()) * vocab);
      model.forward(*step, expected.data());
      const LogitsView view = executor->execute(*step);
      REQUIRE(view.device == Device::cpu);
      REQUIRE(view.ready.is_ready_on_return());
      REQUIRE(view.num_rows == step->num_logits());
      REQUIRE(view.vocab_size == vocab);
      REQUIRE(view.row_stride >= vocab);
      for (int32_t r = 0; r < view.num_rows; ++r)
        CHECK(std::memcmp(view.row(r), expected.data() + static_cast<size_t>(r) * vocab, sizeof(float) * vocab) == 0);
    }
    // The golden argmax of every prompt position (from the prefill above, run again).
    const LogitsView view = executor->execute(prefill);
    for (int32_t r = 0; r < n; ++r) CHECK(argmax(view.row(r), vocab) == c.all_positions_argmax[static_cast<size_t>(r)]);
  }
}

TEST_CASE("a CPU executor's logits view stays unchanged through the next execute, and its argmax_rows picks the "
          "Sampler's greedy ids", "[executor]") {
  const std::shared_ptr<const Checkpoint> checkpoint = stories_checkpoint();
  PluginRegistry plugins{{LLMK_PLUGIN_BUILD_DIR}};
  const auto executor = make_executor(small_config(), checkpoint, plugins);
  REQUIRE(executor->views_kept() == 2);
  const std::vector<GoldenPrompt>& cases = golden_cases();
  const int32_t vocab = executor->model_config().vocab_size;
  const LogitsView first = executor->execute(contiguous_step(cases[0].input_ids, 0, 0, false));
  const std::vector<float> copy(first.row(0), first.row(0) + vocab);
  // Saving KV and reading the config between steps do not touch the logits.
  std::vector<int32_t> slots(cases[0].input_ids.size());
  std::iota(slots.begin(), slots.end(), 0);
  (void)executor->save_kv(slots);
  CHECK(std::memcmp(first.row(0), copy.data(), sizeof(float) * vocab) == 0);
  // The next step's logits (another prompt's, every position) land beside
  // them: the first view is still intact while the second is read.
  const int32_t n = static_cast<int32_t>(cases[1].input_ids.size());
  const LogitsView second = executor->execute(contiguous_step(cases[1].input_ids, 0, 512, true));
  CHECK(std::memcmp(first.row(0), copy.data(), sizeof(float) * vocab) == 0);
  CHECK(argmax(copy.data(), vocab) == cases[0].greedy_ids[0]);
  // Every position's argmax, by the executor's threads: the golden argmax,
  // and the id the Sampler picks greedily.
  std::vector<int32_t> ids(static_cast<size_t>(n), -1);
  REQUIRE(executor->argmax_rows(second, ids));
  Sampler sampler(vocab, 1);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  for (int32_t r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(ids[static_cast<size_t>(r)] == cases[1].all_positions_argmax[static_cast<size_t>(r)]);
    SamplerRow row;
    row.logits = second.row(r);
    row.params = &greedy;
    CHECK(ids[static_cast<size_t>(r)] == sampler.sample_one(row).token_id);
  }
  // Too few outputs, or a view of another device: refused, naming which.
  std::vector<int32_t> short_out(static_cast<size_t>(n - 1));
  CHECK_THROWS_WITH(executor->argmax_rows(second, short_out), Contains(std::to_string(n - 1) + " outputs for"));
  LogitsView elsewhere = second;
  elsewhere.device = Device::cuda;
  CHECK_THROWS_WITH(executor->argmax_rows(elsewhere, ids), Contains("device 'cuda'"));
}

TEST_CASE("a CPU executor times its forwards per operation: every operation counted, the sum within the wall time, "
          "the greedy token still the reference's, nothing added after it stops",
          "[executor]") {
  const std::shared_ptr<const Checkpoint> checkpoint = stories_checkpoint();
  PluginRegistry plugins{{LLMK_PLUGIN_BUILD_DIR}};
  const auto executor = make_executor(small_config(), checkpoint, plugins);
  const GoldenPrompt& c = golden_cases()[0];
  const int32_t vocab = executor->model_config().vocab_size;
  const int32_t n = static_cast<int32_t>(c.input_ids.size());

  ForwardTimings timings;
  REQUIRE(executor->time_forwards(&timings));
  const auto t0 = std::chrono::steady_clock::now();
  executor->execute(contiguous_step(c.input_ids, 0, 0, false));
  const LogitsView timed = executor->execute(contiguous_step({c.greedy_ids[0]}, n, 0, false));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(argmax(timed.row(0), vocab) == c.greedy_ids[1]);
  CHECK(timings.forwards == 2);
  for (size_t op = 0; op < ForwardTimings::kOps; ++op) {
    INFO(ForwardTimings::name(static_cast<ForwardOp>(op)));
    CHECK(timings.seconds[op] > 0.0);
  }
  CHECK(timings.total() <= wall);

  // Stopped: the next forwards add nothing.
  REQUIRE(executor->time_forwards(nullptr));
  const ForwardTimings before = timings;
  executor->execute(contiguous_step(c.input_ids, 0, 512, false));
  CHECK(timings.forwards == before.forwards);
  CHECK(timings.seconds == before.seconds);
}

TEST_CASE("KV saved through the executor restores to the same next token", "[executor]") {
  const std::shared_ptr<const Checkpoint> checkpoint = stories_checkpoint();
  PluginRegistry plugins{{LLMK_PLUGIN_BUILD_DIR}};
  for (const char* kv_dtype : {"f32", "f16", "i8"}) {
    INFO("kv_cache.dtype " << kv_dtype);
    EngineConfig cfg = small_config();
    apply_override(cfg, std::string("kv_cache.dtype=") + kv_dtype);
    const auto executor = make_executor(cfg, checkpoint, plugins);
    const std::vector<GoldenPrompt>& cases = golden_cases();
    const GoldenPrompt& c = cases[3];
    const int32_t n = static_cast<int32_t>(c.input_ids.size()), vocab = executor->model_config().vocab_size;
    executor->execute(contiguous_step(c.input_ids, 0, 0, false));
    std::vector<int32_t> slots(c.input_ids.size());
    std::iota(slots.begin(), slots.end(), 0);
    const std::vector<uint8_t> saved = executor->save_kv(slots);
    executor->execute(contiguous_step(cases[4].input_ids, 0, 0, false));  // overwrites slots 0..
    // Restored to other slots, as after a preemption: a range from slot 512.
    std::vector<int32_t> moved(slots.size());
    std::iota(moved.begin(), moved.end(), 512);
    executor->restore_kv(moved, saved);
    const LogitsView view = executor->execute(contiguous_step({c.greedy_ids[0]}, n, 512, false));
    const std::vector<float> restored(view.row(0), view.row(0) + vocab);
    // The same decode over a prompt prefilled in place, never saved.
    executor->execute(contiguous_step(c.input_ids, 0, 512, false));
    const LogitsView direct = executor->execute(contiguous_step({c.greedy_ids[0]}, n, 512, false));
    CHECK(std::memcmp(direct.row(0), restored.data(), sizeof(float) * vocab) == 0);
    if (std::string(kv_dtype) == "f32") CHECK(argmax(restored.data(), vocab) == c.greedy_ids[1]);
    CHECK_THROWS_AS(executor->restore_kv(moved, std::vector<uint8_t>(saved.size() - 1)), Error);
  }
}

TEST_CASE("fed-back rows take the previous step's ids: the same logits as the ids written in, and clear refusals",
          "[executor][overlap]") {
  const std::shared_ptr<const Checkpoint> checkpoint = stories_checkpoint();
  PluginRegistry plugins{{LLMK_PLUGIN_BUILD_DIR}};
  const auto executor = make_executor(small_config(), checkpoint, plugins);
  const std::vector<GoldenPrompt>& cases = golden_cases();
  const GoldenPrompt& c = cases[2];
  const int32_t n = static_cast<int32_t>(c.input_ids.size()), vocab = executor->model_config().vocab_size;

  // Two sequences (ranges at slots 0 and 512) decode their first greedy token.
  StepBatch decode;
  decode.token_ids = {c.greedy_ids[0], c.greedy_ids[0]};
  decode.positions = {n, n};
  decode.slot_mapping = {n, 512 + n};
  decode.query_start = {0, 1, 2};
  decode.context_lens = {n + 1, n + 1};
  decode.block_tables = {0, 512};
  decode.max_blocks_per_seq = 1;
  decode.block_size = 512;
  decode.logits_rows = {0, 1};
  executor->execute(contiguous_step(c.input_ids, 0, 0, false));
  executor->execute(contiguous_step(c.input_ids, 0, 512, false));
  const LogitsView direct_view = executor->execute(decode);
  const std::vector<float> direct(direct_view.row(0), direct_view.row(0) + 2 * vocab);
  CHECK(argmax(direct.data(), vocab) == c.greedy_ids[1]);

  // The same step planned ahead: token 0 in its rows, and the ids from the previous
  // step's logits rows 3 and 1 (the sampler's order, not the batch's).
  StepBatch ahead = decode;
  ahead.token_ids = {0, 0};
  ahead.fed_back = {{1, 3}, {0, 1}};
  const std::vector<int32_t> previous_ids = {7, c.greedy_ids[0], 9, c.greedy_ids[0]};
  SampledIds previous;
  previous.data = previous_ids.data();
  previous.count = 4;
  const LogitsView fed_view = executor->execute(ahead, previous);
  CHECK(std::memcmp(fed_view.row(0), direct.data(), sizeof(float) * 2 * vocab) == 0);

  // The previous step failed: its rows read token 0 (their output is discarded).
  SampledIds failed;
  failed.failed = true;
  CHECK_NOTHROW(executor->execute(ahead, failed));

  CHECK_THROWS_WITH(executor->execute(ahead), Contains("2 fed-back rows, but no ids of a previous step"));
  SampledIds short_ids = previous;
  short_ids.count = 2;
  CHECK_THROWS_WITH(executor->execute(ahead, short_ids), Contains("logits row 3, but the previous step sampled 2"));
  SampledIds device_ids = previous;
  device_ids.device = Device::cuda;
  CHECK_THROWS_WITH(executor->execute(ahead, device_ids), Contains("fed-back ids in cuda memory for the cpu executor"));
  StepBatch bad_row = ahead;
  bad_row.fed_back = {{2, 0}};
  CHECK_THROWS_WITH(executor->execute(bad_row, previous), Contains("fed-back token row 2"));
  CHECK_THROWS_WITH(executor->execute(bad_row, failed), Contains("fed-back token row 2"));  // checked either way
}

TEST_CASE("copy_logits_to_host copies a CPU view's rows and refuses rows outside it", "[executor]") {
  const std::shared_ptr<const Checkpoint> checkpoint = stories_checkpoint();
  PluginRegistry plugins{{LLMK_PLUGIN_BUILD_DIR}};
  const auto executor = make_executor(small_config(), checkpoint, plugins);
  const LogitsView view = executor->execute(contiguous_step({1, 40, 52, 77, 301}, 0, 0, true));
  const int32_t vocab = view.vocab_size;
  REQUIRE(view.num_rows == 5);
  std::vector<float> host(static_cast<size_t>(2) * vocab);
  executor->copy_logits_to_host(view, 1, 2, host.data());
  for (int32_t r = 0; r < 2; ++r)
    CHECK(std::memcmp(host.data() + static_cast<size_t>(r) * vocab, view.row(1 + r), sizeof(float) * vocab) == 0);
  CHECK_THROWS_WITH(executor->copy_logits_to_host(view, view.num_rows - 1, 2, host.data()),
                    Contains("outside a view of " + std::to_string(view.num_rows)));
  LogitsView elsewhere = view;
  elsewhere.device = Device::cuda;
  CHECK_THROWS_WITH(executor->copy_logits_to_host(elsewhere, 0, 1, host.data()),
                    Contains("a view in cuda memory given to the cpu executor"));
}
