// attention.cpu against a float64 reference: random paged block tables,
// block sizes 1, 7, 16 and one large block, GQA groups, mixed batches of
// prefill chunks and decodes, F32 and I8 caches.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "plugins/api/llmk_attention.h"
#include "plugins/plugin_library.hpp"

namespace {

using llmk::test::PluginLibrary;

// IEEE binary16 bits to a double (normal, subnormal, zero; no NaN/inf in these tests).
double half_to_double(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -magnitude : magnitude;
}

struct Problem {
  uint32_t num_heads, num_kv_heads, head_dim;
  uint32_t block_size;
  std::vector<int32_t> new_tokens;  // per sequence
  std::vector<int32_t> context;     // per sequence, after the step
};

// Fills the cache for the already-cached positions and runs one step through
// the plugin; compares with softmax(q k^T * scale) v computed in double from
// the same (dequantized when I8) keys and values.
// i8_group: values per scale of an I8 cache.
double run_case(const Problem& p, uint32_t kv_dtype, uint32_t num_threads, uint64_t seed, uint32_t i8_group = 8) {
  static PluginLibrary lib("llmk_attention_cpu");
  const auto& api = lib.api<llmk_attention_api>();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const uint32_t num_seqs = static_cast<uint32_t>(p.new_tokens.size());
  const int64_t hd = p.head_dim, kvh = p.num_kv_heads, nh = p.num_heads;

  // Paged layout: every sequence's blocks come from a shuffled pool.
  int64_t max_blocks = 0;
  for (int32_t c : p.context) max_blocks = std::max<int64_t>(max_blocks, (c + p.block_size - 1) / p.block_size);
  const int64_t pool = max_blocks * num_seqs + 3;
  std::vector<int32_t> blocks(pool);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<int32_t> tables(num_seqs * max_blocks, -1);
  for (uint32_t s = 0, next = 0; s < num_seqs; ++s)
    for (int64_t b = 0; b < (p.context[s] + p.block_size - 1) / p.block_size; ++b)
      tables[s * max_blocks + b] = blocks[next++] * static_cast<int32_t>(p.block_size);
  const uint32_t num_slots = static_cast<uint32_t>(pool * p.block_size);

  // Full K/V history per sequence, [context, kvh, hd]; the first
  // context - new positions go straight into the cache via a prior "step".
  std::vector<std::vector<float>> k_all(num_seqs), v_all(num_seqs);
  for (uint32_t s = 0; s < num_seqs; ++s) {
    k_all[s].resize(p.context[s] * kvh * hd);
    v_all[s].resize(p.context[s] * kvh * hd);
    for (auto& x : k_all[s]) x = normal(rng);
    for (auto& x : v_all[s]) x = normal(rng);
  }
  const bool i8 = kv_dtype == LLMK_DTYPE_I8, f16 = kv_dtype == LLMK_DTYPE_F16;
  const uint32_t group = i8 ? i8_group : 0;
  const size_t elems = static_cast<size_t>(num_slots) * kvh * hd;
  std::vector<float> kf(i8 || f16 ? 0 : elems), vf(i8 || f16 ? 0 : elems);
  std::vector<uint16_t> kh(f16 ? elems : 0), vh(f16 ? elems : 0);
  std::vector<int8_t> kq(i8 ? elems : 0), vq(i8 ? elems : 0);
  std::vector<float> ks(i8 ? elems / group : 0), vs(i8 ? elems / group : 0);
  void* k_cache = i8 ? static_cast<void*>(kq.data()) : f16 ? static_cast<void*>(kh.data()) : kf.data();
  void* v_cache = i8 ? static_cast<void*>(vq.data()) : f16 ? static_cast<void*>(vh.data()) : vf.data();
  llmk_kv_layer kv{k_cache, v_cache, i8 ? ks.data() : nullptr, i8 ? vs.data() : nullptr, num_slots};

  llmk_attention_desc desc{sizeof(llmk_attention_desc), p.num_heads, p.num_kv_heads, p.head_dim,
                           1.0f / std::sqrt(static_cast<float>(p.head_dim)), kv_dtype, group, 4096, 4096,
                           num_threads, "{}"};
  char why[256] = {};
  REQUIRE(api.supports(&desc, why, sizeof(why)) == 1);
  llmk_error err{};
  void* self = api.create(&desc, &err);
  REQUIRE(self != nullptr);

  auto run_step = [&](const std::vector<int32_t>& first_pos, const std::vector<int32_t>& count,
                      std::vector<float>* q_out, std::vector<float>* out) {
    std::vector<int32_t> qs{0}, ctx, slots;
    std::vector<float> k, v;
    for (uint32_t s = 0; s < num_seqs; ++s) {
      for (int32_t i = 0; i < count[s]; ++i) {
        const int64_t pos = first_pos[s] + i;
        slots.push_back(tables[s * max_blocks + pos / p.block_size] + static_cast<int32_t>(pos % p.block_size));
        k.insert(k.end(), k_all[s].begin() + pos * kvh * hd, k_all[s].begin() + (pos + 1) * kvh * hd);
        v.insert(v.end(), v_all[s].begin() + pos * kvh * hd, v_all[s].begin() + (pos + 1) * kvh * hd);
      }
      qs.push_back(qs.back() + count[s]);
      ctx.push_back(first_pos[s] + count[s]);
    }
    const uint32_t n = static_cast<uint32_t>(slots.size());
    std::vector<float> q(n * nh * hd);
    for (auto& x : q) x = normal(rng) * 2.0f;  // sharper softmax than unit scores
    out->assign(q.size(), NAN);
    llmk_attention_args a{sizeof(llmk_attention_args), n, num_seqs, q.data(), k.data(), v.data(), out->data(),
                          qs.data(), ctx.data(), slots.data(), tables.data(), static_cast<uint32_t>(max_blocks),
                          p.block_size, kv};
    REQUIRE(api.forward(self, &a, &err) == LLMK_OK);
    *q_out = q;
  };

  std::vector<int32_t> zero(num_seqs, 0), cached(num_seqs), fresh(num_seqs);
  for (uint32_t s = 0; s < num_seqs; ++s) {
    cached[s] = p.context[s] - p.new_tokens[s];
    fresh[s] = p.new_tokens[s];
  }
  std::vector<float> q, out;
  // Positions already in the cache, written by an earlier step. A sequence with
  // nothing cached still needs one row in that step; give it none by skipping.
  if (std::any_of(cached.begin(), cached.end(), [](int32_t c) { return c > 0; })) run_step(zero, cached, &q, &out);
  run_step(cached, fresh, &q, &out);

  // What the cache holds, as floats (dequantized for I8, widened for F16;
  // the F16 values written must also be the nearest halves of the inputs).
  auto stored = [&](const std::vector<float>& all, const std::vector<int8_t>& qv, const std::vector<float>& sc,
                    const std::vector<uint16_t>& hv, uint32_t s, int64_t pos, int64_t h, int64_t i) -> double {
    const double exact = all[(pos * kvh + h) * hd + i];
    if (!i8 && !f16) return exact;
    const int64_t slot = tables[s * max_blocks + pos / p.block_size] + pos % p.block_size;
    const int64_t off = (slot * kvh + h) * hd + i;
    if (i8) return static_cast<double>(qv[off]) * sc[off / group];
    const double half = half_to_double(hv[off]);
    // Round to nearest: within half a unit in the last place of the input
    // (2^-11 relative; 2^-25 absolute among subnormals).
    REQUIRE(std::fabs(half - exact) <= std::max(std::ldexp(std::fabs(exact), -11), std::ldexp(1.0, -25)));
    return half;
  };

  double max_err = 0.0;
  int64_t row = 0;
  for (uint32_t s = 0; s < num_seqs; ++s) {
    for (int32_t t = 0; t < p.new_tokens[s]; ++t, ++row) {
      const int64_t pos = cached[s] + t;
      for (int64_t h = 0; h < nh; ++h) {
        const int64_t g = h / (nh / kvh);
        std::vector<double> w(pos + 1);
        double mx = -1e300;
        for (int64_t j = 0; j <= pos; ++j) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i)
            d += static_cast<double>(q[(row * nh + h) * hd + i]) * stored(k_all[s], kq, ks, kh, s, j, g, i);
          w[j] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, w[j]);
        }
        double sum = 0;
        for (auto& x : w) sum += (x = std::exp(x - mx));
        for (int64_t i = 0; i < hd; ++i) {
          double ref = 0;
          for (int64_t j = 0; j <= pos; ++j) ref += w[j] / sum * stored(v_all[s], vq, vs, vh, s, j, g, i);
          max_err = std::max(max_err, std::fabs(ref - out[(row * nh + h) * hd + i]));
        }
      }
    }
  }
  api.destroy(self);
  return max_err;
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
  // One sequence alone: its KV heads are split across threads.
  Problem alone{6, 3, head_dim, block_size, {1}, {77}};
  INFO("head_dim " << head_dim << ", block_size " << block_size);
  CHECK(run_case(gqa, LLMK_DTYPE_F32, 2, 21 + head_dim) < 2e-5);
  CHECK(run_case(mha, LLMK_DTYPE_F32, 1, 22 + head_dim) < 2e-5);
  CHECK(run_case(alone, LLMK_DTYPE_F32, 2, 23 + head_dim) < 2e-5);
  CHECK(run_case(gqa, LLMK_DTYPE_I8, 2, 24 + head_dim) < 2e-5);
  CHECK(run_case(alone, LLMK_DTYPE_I8, 2, 25 + head_dim) < 2e-5);
  CHECK(run_case(gqa, LLMK_DTYPE_F16, 2, 26 + head_dim) < 2e-5);
  CHECK(run_case(mha, LLMK_DTYPE_F16, 1, 27 + head_dim) < 2e-5);
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
  llmk_attention_desc d{sizeof(llmk_attention_desc), 6, 4, 64, 0.125f, LLMK_DTYPE_F32, 0, 128, 16, 1, "{}"};
  CHECK(api.supports(&d, why, sizeof(why)) == 0);
  CHECK(std::string(why).find("divide") != std::string::npos);
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

TEST_CASE("attention.cpu rejects a block table that points outside the cache", "[attention]") {
  PluginLibrary lib("llmk_attention_cpu");
  const auto& api = lib.api<llmk_attention_api>();
  llmk_attention_desc d{sizeof(llmk_attention_desc), 2, 1, 16, 0.25f, LLMK_DTYPE_F32, 0, 64, 16, 1, "{}"};
  llmk_error err{};
  void* self = api.create(&d, &err);
  REQUIRE(self);
  std::vector<float> q(32, 1.0f), k(16, 1.0f), v(16, 1.0f), out(32), kc(16 * 8), vc(16 * 8);
  std::vector<int32_t> qs{0, 1}, ctx{3}, slots{2}, table{6};  // block of 4 starting at slot 6: past 8 slots
  llmk_attention_args a{sizeof(llmk_attention_args), 1, 1, q.data(), k.data(), v.data(), out.data(), qs.data(),
                        ctx.data(), slots.data(), table.data(), 1, 4, {kc.data(), vc.data(), nullptr, nullptr, 8}};
  CHECK(api.forward(self, &a, &err) == LLMK_ERR_INVALID_ARGUMENT);
  CHECK(std::string(err.message).find("outside") != std::string::npos);
  api.destroy(self);
}
