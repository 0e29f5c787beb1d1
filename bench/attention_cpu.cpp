// Decode attention on the CPU against the machine's read bandwidth: one
// decode step of --batch sequences, each with --context cached positions in
// a paged cache (blocks of --block-size slots, scattered), through the
// attention plugin. A decode step reads every cached K/V row once, so the
// figure that matters is the KV bytes read per second as a fraction of the
// bandwidth measured in the same run.
//
//   bench_attention_cpu [--plugin attention.cpu] [--batch 64] [--context 192]
//                       [--heads 12] [--kv-heads 12] [--head-dim 64]
//                       [--kv-dtype f32|f16|i8] [--group 8] [--block-size 16]
//                       [--threads 2] [--steps 20] [--cold 0|1]
//
// The same layer's cache is read step after step, so a cache that fits in
// the last-level cache is partly read from there. --cold 1 reads 256 MiB of
// other memory before each step (untimed), as a forward's weights and other
// layers do between two visits of a layer.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/aligned_buffer.hpp"
#include "core/plugin_loader.hpp"
#include "limits.hpp"

namespace {

volatile int64_t g_sink = 0;  // keeps --cold's reads

struct Options {
  std::string plugin = "attention.cpu";
  uint32_t batch = 64, context = 192, heads = 12, kv_heads = 12, head_dim = 64;
  std::string kv_dtype = "f32";
  uint32_t group = 8, block_size = 16, threads = 2, steps = 20;
  bool cold = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    auto u = [&] { return static_cast<uint32_t>(std::stoul(v)); };
    if (k == "--plugin") o.plugin = v;
    else if (k == "--batch") o.batch = u();
    else if (k == "--context") o.context = u();
    else if (k == "--heads") o.heads = u();
    else if (k == "--kv-heads") o.kv_heads = u();
    else if (k == "--head-dim") o.head_dim = u();
    else if (k == "--kv-dtype") o.kv_dtype = v;
    else if (k == "--group") o.group = u();
    else if (k == "--block-size") o.block_size = u();
    else if (k == "--threads") o.threads = u();
    else if (k == "--steps") o.steps = u();
    else if (k == "--cold") {
      if (v != "0" && v != "1") {
        std::fprintf(stderr, "--cold takes 0 or 1, not '%s'\n", v.c_str());
        std::exit(2);
      }
      o.cold = v == "1";
    }
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  if (o.kv_dtype != "f32" && o.kv_dtype != "f16" && o.kv_dtype != "i8") {
    std::fprintf(stderr, "--kv-dtype must be f32, f16 or i8\n");
    std::exit(2);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const bool i8 = o.kv_dtype == "i8", f16 = o.kv_dtype == "f16";
  const uint32_t blocks_per_seq = (o.context + o.block_size - 1) / o.block_size;
  const uint32_t num_blocks = blocks_per_seq * o.batch;
  const uint32_t num_slots = num_blocks * o.block_size;
  const size_t row = static_cast<size_t>(o.kv_heads) * o.head_dim;
  const size_t elems = static_cast<size_t>(num_slots) * row;

  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> kf(i8 || f16 ? 0 : elems), vf(i8 || f16 ? 0 : elems);
  std::vector<uint16_t> kh(f16 ? elems : 0), vh(f16 ? elems : 0);
  std::vector<int8_t> kq(i8 ? elems : 0), vq(i8 ? elems : 0);
  std::vector<float> ks(i8 ? elems / o.group : 0, 0.01f), vs(i8 ? elems / o.group : 0, 0.01f);
  for (auto& x : kf) x = normal(rng);
  for (auto& x : vf) x = normal(rng);
  for (auto& x : kq) x = static_cast<int8_t>(rng() % 255 - 127);
  for (auto& x : vq) x = static_cast<int8_t>(rng() % 255 - 127);
  for (auto& x : kh) x = static_cast<uint16_t>(0x3000 + rng() % 0x1000);  // finite halves around 0.1-1
  for (auto& x : vh) x = static_cast<uint16_t>(0x3000 + rng() % 0x1000);

  // Each sequence's blocks are scattered over the cache, as after a while of serving.
  std::vector<int32_t> blocks(num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<int32_t> tables(num_blocks);
  for (uint32_t b = 0; b < num_blocks; ++b) tables[b] = blocks[b] * static_cast<int32_t>(o.block_size);

  // The step: one new token per sequence at position context - 1.
  std::vector<int32_t> query_start(o.batch + 1), context_lens(o.batch, static_cast<int32_t>(o.context)), slots(o.batch);
  for (uint32_t s = 0; s <= o.batch; ++s) query_start[s] = static_cast<int32_t>(s);
  for (uint32_t s = 0; s < o.batch; ++s) {
    const uint32_t p = o.context - 1;
    slots[s] = tables[s * blocks_per_seq + p / o.block_size] + static_cast<int32_t>(p % o.block_size);
  }
  std::vector<float> q(static_cast<size_t>(o.batch) * o.heads * o.head_dim), k(o.batch * row), v(o.batch * row),
      out(q.size());
  for (auto& x : q) x = normal(rng);
  for (auto& x : k) x = normal(rng);
  for (auto& x : v) x = normal(rng);

  llmk::PluginRegistry registry;
  const llmk_attention_desc desc{sizeof(llmk_attention_desc), o.heads, o.kv_heads, o.head_dim,
                                 1.0f / std::sqrt(static_cast<float>(o.head_dim)),
                                 i8 ? LLMK_DTYPE_I8 : f16 ? LLMK_DTYPE_F16 : LLMK_DTYPE_F32, i8 ? o.group : 0, o.context, o.batch,
                                 o.threads, "{}", 0,  // no sliding window
                                 LLMK_DEVICE_CPU, LLMK_DTYPE_F32, o.batch, o.block_size, 0};  // no sinks
  llmk::AttentionImpl attention(registry.load(o.plugin, LLMK_PLUGIN_ATTENTION), desc);
  void* k_cache = i8 ? static_cast<void*>(kq.data()) : f16 ? static_cast<void*>(kh.data()) : kf.data();
  void* v_cache = i8 ? static_cast<void*>(vq.data()) : f16 ? static_cast<void*>(vh.data()) : vf.data();
  const llmk_kv_layer kv{k_cache, v_cache,
                         i8 ? ks.data() : nullptr, i8 ? vs.data() : nullptr, num_slots};
  const llmk_attention_step step{sizeof(llmk_attention_step), o.batch, o.batch, blocks_per_seq, o.block_size,
                                  num_slots, query_start.data(), context_lens.data(), slots.data(), tables.data(),
                                  query_start.data(), context_lens.data(), slots.data(), tables.data(), nullptr,
                                  nullptr};
  const llmk_attention_layer layer{sizeof(llmk_attention_layer), q.data(), k.data(), v.data(), out.data(), kv, nullptr};

  const double bandwidth = llmk::bench::read_bandwidth_gbs(static_cast<int>(o.threads));
  // The plan is made once per step and serves every layer: time it apart
  // from the per-layer run.
  double best_plan = 1e30, best = 1e30;
  llmk::AlignedBuffer workspace;
  std::vector<int64_t> other(o.cold ? (size_t{256} << 20) / sizeof(int64_t) : 0, 1);
  for (uint32_t i = 0; i <= o.steps; ++i) {
    if (o.cold) {
      int64_t sum = 0;
#pragma omp parallel for num_threads(static_cast<int>(o.threads)) reduction(+ : sum)
      for (size_t j = 0; j < other.size(); j += 8) sum += other[j];  // one load per cache line
      g_sink = sum;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const size_t bytes = attention.plan(step);
    const auto t1 = std::chrono::steady_clock::now();
    if (bytes > workspace.bytes()) workspace = llmk::AlignedBuffer(bytes, "the attention workspace");
    const auto t2 = std::chrono::steady_clock::now();
    attention.run(layer, workspace.data(), workspace.bytes());
    const auto t3 = std::chrono::steady_clock::now();
    if (i == 0) continue;  // warm-up
    best_plan = std::min(best_plan, std::chrono::duration<double>(t1 - t0).count());
    best = std::min(best, std::chrono::duration<double>(t3 - t2).count());
  }
  const double bytes_per_slot = static_cast<double>(row) * (i8 ? 1.0 + 4.0 / o.group : f16 ? 2.0 : 4.0) * 2.0;  // K and V
  const double bytes = bytes_per_slot * o.batch * o.context;
  std::printf("%s, %s KV, %u sequences x %u positions, %u/%u heads x %u, block %u, %u threads%s\n", o.plugin.c_str(),
              o.kv_dtype.c_str(), o.batch, o.context, o.heads, o.kv_heads, o.head_dim, o.block_size, o.threads,
              o.cold ? ", cold cache" : "");
  std::printf("limit: read bandwidth %.1f GB/s\n", bandwidth);
  std::printf("decode step (one layer): %.3f ms, KV read %.1f MB -> %.1f GB/s = %.0f%% of bandwidth\n", best * 1e3,
              bytes / 1e6, bytes / best / 1e9, 100.0 * bytes / best / 1e9 / bandwidth);
  std::printf("plan (once per step, all layers): %.1f us\n", best_plan * 1e6);
  return 0;
}
