#include "conformance/attention_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <numeric>
#include <optional>
#include <random>

namespace llmk::conformance {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double bf16_bits_to_double(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// One layer's cache as the standard layout stores it, on the device and
// read back to the host after the steps.
struct Cache {
  uint32_t dtype;
  size_t elem_bytes;
  std::vector<uint8_t> k, v;      // [num_slots, kvh, hd] elements of elem_bytes
  std::vector<float> k_scale, v_scale;  // I8: [num_slots, kvh, hd / group]

  double value(const std::vector<uint8_t>& raw, const std::vector<float>& scale, int64_t off, uint32_t group) const {
    switch (dtype) {
      case LLMK_DTYPE_I8: return static_cast<double>(static_cast<int8_t>(raw[off])) * scale[off / group];
      case LLMK_DTYPE_F16: {
        uint16_t h;
        std::memcpy(&h, &raw[off * 2], 2);
        return half_bits_to_double(h);
      }
      case LLMK_DTYPE_BF16: {
        uint16_t h;
        std::memcpy(&h, &raw[off * 2], 2);
        return bf16_bits_to_double(h);
      }
      default: {
        float f;
        std::memcpy(&f, &raw[off * 4], 4);
        return f;
      }
    }
  }
};

}  // namespace

double half_bits_to_double(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double magnitude = exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -magnitude : magnitude;
}

AttentionOutcome check_attention_step(const llmk_attention_api& api, const AttentionProblem& p, uint32_t kv_dtype,
                                      uint32_t num_threads, uint64_t seed, uint32_t i8_group, Device* device) {
  std::unique_ptr<Device> host;
  if (device == nullptr) {
    host = make_cpu_device();
    device = host.get();
  }
  AttentionOutcome result;
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

  // Full K/V history per sequence, [context, kvh, hd].
  auto seq_rng = [seed](uint32_t s, uint64_t stream) { return std::mt19937_64(seed * 1000003u + s * 4u + stream); };
  std::vector<std::vector<float>> k_all(num_seqs), v_all(num_seqs);
  for (uint32_t s = 0; s < num_seqs; ++s) {
    std::mt19937_64 kv_rng = seq_rng(s, 0);
    normal.reset();  // no value cached from another sequence's draws
    k_all[s].resize(p.context[s] * kvh * hd);
    v_all[s].resize(p.context[s] * kvh * hd);
    for (auto& x : k_all[s]) x = normal(kv_rng);
    for (auto& x : v_all[s]) x = normal(kv_rng);
  }
  const bool i8 = kv_dtype == LLMK_DTYPE_I8;
  const bool sixteen = kv_dtype == LLMK_DTYPE_F16 || kv_dtype == LLMK_DTYPE_BF16;
  const uint32_t group = i8 ? i8_group : 0;
  const size_t elems = static_cast<size_t>(num_slots) * kvh * hd;
  Cache cache{kv_dtype, i8 ? 1u : sixteen ? 2u : 4u, {}, {}, {}, {}};

  llmk_attention_desc desc{sizeof(llmk_attention_desc), p.num_heads, p.num_kv_heads, p.head_dim,
                           1.0f / std::sqrt(static_cast<float>(p.head_dim)), kv_dtype, group, 4096, 4096,
                           num_threads, "{}", p.sliding_window, device->device(), LLMK_DTYPE_F32,
                           num_seqs, p.block_size, p.sink_tokens};
  char why[512] = {};
  if (api.supports(&desc, why, sizeof(why)) != 1) {
    result.supported = false;
    result.why = why;
    return result;
  }
  llmk_error err{};
  void* self = api.create(&desc, &err);
  if (self == nullptr) {
    result.why = std::string("create failed: ") + err.message;
    result.max_err = kInf;
    return result;
  }
  struct Destroy {
    const llmk_attention_api& api;
    void* self;
    ~Destroy() { api.destroy(self); }
  } destroy{api, self};
  auto fail = [&](std::string why_failed) {
    result.why = std::move(why_failed);
    result.max_err = kInf;
    return result;
  };

  // This check reads the cache, so the plugin must declare the standard
  // layout, with exactly its sizes.
  llmk_kv_layout layout{};
  layout.struct_size = sizeof(layout);
  if (api.kv_layout(self, &layout, &err) != LLMK_OK) return fail(std::string("kv_layout failed: ") + err.message);
  if (layout.kind != LLMK_KV_LAYOUT_STANDARD) {
    result.supported = false;
    result.why = "an opaque KV layout: this check reads the standard layout only";
    return result;
  }
  const uint64_t row_elems = static_cast<uint64_t>(kvh * hd);
  const uint64_t scale_bytes = i8 ? row_elems / group * 4 : 0;
  const uint64_t row_bytes = row_elems * cache.elem_bytes;
  if (layout.k_bytes_per_slot != row_bytes || layout.v_bytes_per_slot != row_bytes ||
      layout.k_scale_bytes_per_slot != scale_bytes || layout.v_scale_bytes_per_slot != scale_bytes ||
      device->alignment() % std::max<uint32_t>(layout.alignment, 1) != 0) {
    return fail("the declared standard KV layout has the wrong sizes per slot or an alignment the device's "
                "allocations lack (" + std::to_string(layout.k_bytes_per_slot) + " K bytes, expected " +
                std::to_string(row_bytes) + "; alignment " + std::to_string(layout.alignment) +
                ", allocations " + std::to_string(device->alignment()) + ")");
  }
  std::optional<size_t> bound;
  if (api.workspace_bound != nullptr) {
    size_t bytes = 0;
    if (api.workspace_bound(self, &bytes, &err) != LLMK_OK)
      return fail(std::string("workspace_bound failed: ") + err.message);
    bound = bytes;
  }

  std::vector<int32_t> zero(num_seqs, 0), cached(num_seqs), fresh(num_seqs);
  for (uint32_t s = 0; s < num_seqs; ++s) {
    cached[s] = p.context[s] - p.new_tokens[s];
    fresh[s] = p.new_tokens[s];
  }
  // Token trees: each new token's parent (-1: the cached context) and depth.
  const bool trees = std::any_of(p.tree_parents.begin(), p.tree_parents.end(), [](const auto& t) { return !t.empty(); });
  std::vector<std::vector<int32_t>> parents(num_seqs), depths(num_seqs);
  for (uint32_t s = 0; s < num_seqs; ++s) {
    for (int32_t t = 0; t < fresh[s]; ++t) {
      const bool given = s < p.tree_parents.size() && !p.tree_parents[s].empty();
      parents[s].push_back(given ? p.tree_parents[s].at(t) : t - 1);
      // A parent that is not an earlier new token is the plugin's to refuse
      // (the refusal cases give such trees); such a node is given depth 0,
      // which no reference output reads because the step is refused.
      const int32_t parent = parents[s][t];
      depths[s].push_back(parent < 0 || parent >= t ? 0 : depths[s][parent] + 1);
    }
  }
  std::vector<float> q, q_sink, out;
  try {
    cache.k.assign(elems * cache.elem_bytes, 0);
    cache.v.assign(elems * cache.elem_bytes, 0);
    cache.k_scale.assign(i8 ? elems / group : 0, 0.0f);
    cache.v_scale.assign(i8 ? elems / group : 0, 0.0f);
    const DeviceBuffer k_cache(*device, cache.k), v_cache(*device, cache.v);
    const DeviceBuffer k_scale(*device, cache.k_scale), v_scale(*device, cache.v_scale);
    const llmk_kv_layer kv{k_cache.data(), v_cache.data(), i8 ? static_cast<float*>(k_scale.data()) : nullptr,
                           i8 ? static_cast<float*>(v_scale.data()) : nullptr, num_slots};

    auto run_step = [&](const std::vector<int32_t>& first_pos, const std::vector<int32_t>& count,
                        std::vector<float>* q_out, std::vector<float>* out) {
      std::vector<int32_t> qs{0}, ctx, slots, step_parents;
      std::vector<float> k, v, q, qk;
      for (uint32_t s = 0; s < num_seqs; ++s) {
        std::mt19937_64 q_rng = seq_rng(s, first_pos[s] == 0 ? 1 : 2);
        normal.reset();
        // Twice unit scale: a sharper softmax than unit scores.
        for (int64_t i = 0; i < count[s] * nh * hd; ++i) q.push_back(normal(q_rng) * 2.0f);
        if (p.sink_tokens > 0) {  // the sinks' queries: other numbers of the same scale
          std::mt19937_64 qk_rng = seq_rng(s, 3);
          normal.reset();
          for (int64_t i = 0; i < count[s] * nh * hd; ++i) qk.push_back(normal(qk_rng) * 2.0f);
        }
        for (int32_t i = 0; i < count[s]; ++i) {
          const int64_t pos = first_pos[s] + i;
          slots.push_back(tables[s * max_blocks + pos / p.block_size] + static_cast<int32_t>(pos % p.block_size));
          k.insert(k.end(), k_all[s].begin() + pos * kvh * hd, k_all[s].begin() + (pos + 1) * kvh * hd);
          v.insert(v.end(), v_all[s].begin() + pos * kvh * hd, v_all[s].begin() + (pos + 1) * kvh * hd);
        }
        qs.push_back(qs.back() + count[s]);
        ctx.push_back(first_pos[s] + count[s]);
        if (trees && &count == &fresh) step_parents.insert(step_parents.end(), parents[s].begin(), parents[s].end());
      }
      const uint32_t n = static_cast<uint32_t>(slots.size());
      out->assign(q.size(), NAN);
      const DeviceBuffer d_qs(*device, qs), d_ctx(*device, ctx), d_slots(*device, slots), d_tables(*device, tables);
      const DeviceBuffer d_q(*device, q), d_k(*device, k), d_v(*device, v), d_out(*device, *out);
      const DeviceBuffer d_qk(*device, qk), d_parents(*device, step_parents);
      // On the CPU the step's device arrays are its host arrays (the contract).
      const bool on_host = device->device() == LLMK_DEVICE_CPU;
      auto device_array = [&](const DeviceBuffer& d, const std::vector<int32_t>& h) {
        return on_host ? h.data() : static_cast<const int32_t*>(d.data());
      };
      const llmk_attention_step step{sizeof(llmk_attention_step), n, num_seqs, static_cast<uint32_t>(max_blocks),
                                     p.block_size, num_slots, qs.data(), ctx.data(), slots.data(), tables.data(),
                                     device_array(d_qs, qs), device_array(d_ctx, ctx), device_array(d_slots, slots),
                                     device_array(d_tables, tables),
                                     step_parents.empty() ? nullptr : step_parents.data(),
                                     step_parents.empty() ? nullptr : device_array(d_parents, step_parents)};
      const llmk_attention_layer layer{sizeof(llmk_attention_layer), d_q.data(), d_k.data(), d_v.data(),
                                       d_out.data(), kv, p.sink_tokens > 0 ? d_qk.data() : nullptr};
      *q_out = q;
      q_sink = qk;
      llmk_error step_err{};
      size_t workspace_bytes = 0;
      if (api.plan(self, &step, &workspace_bytes, &step_err) != LLMK_OK) {
        result.why = std::string("plan failed: ") + step_err.message;
        return false;
      }
      if (bound && workspace_bytes > *bound) {
        result.why = "plan() asked for " + std::to_string(workspace_bytes) + " workspace bytes, more than the " +
                     std::to_string(*bound) + " its workspace_bound declares";
        return false;
      }
      // Exactly what plan() asked for, so a CPU plugin that writes past it
      // trips the sanitizers.
      const DeviceBuffer workspace(*device, workspace_bytes);
      if (api.run(self, &layer, workspace.data(), workspace_bytes, device->stream(), &step_err) != LLMK_OK) {
        result.why = std::string("run failed: ") + step_err.message;
        return false;
      }
      device->synchronize();
      d_out.copy_out(*out);
      return true;
    };

    // Positions already in the cache, written by an earlier step (skipped
    // when no sequence has any: a step needs at least one row).
    bool ok = true;
    if (std::any_of(cached.begin(), cached.end(), [](int32_t c) { return c > 0; }))
      ok = run_step(zero, cached, &q, &out);
    if (ok) ok = run_step(cached, fresh, &q, &out);
    if (!ok) {
      result.max_err = kInf;
      return result;
    }
    k_cache.copy_out(cache.k);
    v_cache.copy_out(cache.v);
    k_scale.copy_out(cache.k_scale);
    v_scale.copy_out(cache.v_scale);
  } catch (const std::exception& e) {
    return fail(std::string("the device failed: ") + e.what());
  }

  // What the cache holds for (sequence s, position pos, kv head h, lane i).
  auto offset = [&](uint32_t s, int64_t pos, int64_t h, int64_t i) {
    const int64_t slot = tables[s * max_blocks + pos / p.block_size] + pos % p.block_size;
    return (slot * kvh + h) * hd + i;
  };
  auto K = [&](uint32_t s, int64_t pos, int64_t h, int64_t i) {
    return cache.value(cache.k, cache.k_scale, offset(s, pos, h, i), group);
  };
  auto V = [&](uint32_t s, int64_t pos, int64_t h, int64_t i) {
    return cache.value(cache.v, cache.v_scale, offset(s, pos, h, i), group);
  };

  // Every stored value against the input it came from: exact for F32,
  // nearest for F16 (11 significant bits) and BF16 (8), within half a step
  // of a symmetric group scale of at most max|group| / 127 for I8.
  for (uint32_t s = 0; s < num_seqs && result.cache_ok; ++s)
    for (int64_t pos = 0; pos < p.context[s] && result.cache_ok; ++pos)
      for (int64_t h = 0; h < kvh; ++h)
        for (int which = 0; which < 2; ++which) {
          const std::vector<float>& all = which == 0 ? k_all[s] : v_all[s];
          const float* in = &all[(pos * kvh + h) * hd];
          for (int64_t i = 0; i < hd; ++i) {
            const double exact = in[i], value = which == 0 ? K(s, pos, h, i) : V(s, pos, h, i);
            double bound = 0;
            if (i8) {
              double group_max = 0;
              const int64_t g0 = i - i % group;
              for (int64_t j = g0; j < g0 + group; ++j) group_max = std::max(group_max, std::fabs(double(in[j])));
              const double scale = (which == 0 ? cache.k_scale : cache.v_scale)[offset(s, pos, h, i) / group];
              bound = scale <= group_max / 127.0 * (1 + 1e-5) ? 0.5 * scale + 1e-6 * group_max : -1;
            } else if (kv_dtype == LLMK_DTYPE_F16) {
              bound = std::max(std::ldexp(std::fabs(exact), -11), std::ldexp(1.0, -25));
            } else if (kv_dtype == LLMK_DTYPE_BF16) {
              bound = std::ldexp(std::fabs(exact), -8);
            }
            if (result.cache_ok && !(std::fabs(value - exact) <= bound)) {
              result.cache_ok = false;
              result.why = std::string(which == 0 ? "K" : "V") + " of sequence " + std::to_string(s) + " position " +
                           std::to_string(pos) + " head " + std::to_string(h) + " lane " + std::to_string(i) +
                           " is stored as " + std::to_string(value) + " for the input " + std::to_string(exact);
              break;
            }
          }
        }

  double max_err = 0.0;
  int64_t row = 0;
  for (uint32_t s = 0; s < num_seqs; ++s) {
    for (int32_t t = 0; t < p.new_tokens[s]; ++t, ++row) {
      // The query's place in the text: the cached length plus its depth
      // (its row among the new tokens unless they form a tree).
      const int64_t pos = cached[s] + depths[s][t];
      const int64_t low = p.sliding_window == 0 ? 0 : std::max<int64_t>(0, pos - p.sliding_window + 1);
      // The keys the query sees: the sinks, then the window (or the rest),
      // of the cached positions and of its ancestors and itself.
      std::vector<int64_t> keys;
      const int64_t sinks = p.sink_tokens;
      for (int64_t j = 0; j < cached[s]; ++j)
        if (j < sinks || j >= low) keys.push_back(j);
      std::vector<int64_t> line;  // the new tokens it sees, root first
      for (int32_t x = t; x >= 0; x = parents[s][x]) line.insert(line.begin(), x);
      for (int64_t x : line)
        if (cached[s] + x < sinks || cached[s] + depths[s][x] >= low) keys.push_back(cached[s] + x);
      for (int64_t h = 0; h < nh; ++h) {
        const int64_t g = h / (nh / kvh);
        std::vector<double> w(keys.size());
        double mx = -1e300;
        for (size_t x = 0; x < keys.size(); ++x) {
          const int64_t j = keys[x];
          const std::vector<float>& qj = j < static_cast<int64_t>(p.sink_tokens) ? q_sink : q;
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += static_cast<double>(qj[(row * nh + h) * hd + i]) * K(s, j, g, i);
          w[x] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, w[x]);
        }
        double sum = 0;
        for (auto& x : w) sum += (x = std::exp(x - mx));
        for (int64_t i = 0; i < hd; ++i) {
          double ref = 0;
          for (size_t x = 0; x < keys.size(); ++x) ref += w[x] / sum * V(s, keys[x], g, i);
          const double got = out[(row * nh + h) * hd + i];
          // A NaN or a row never written counts as an infinite error.
          const double e = std::isfinite(got) ? std::fabs(ref - got) : kInf;
          max_err = std::max(max_err, e);
        }
      }
    }
  }
  result.max_err = max_err;
  result.out = std::move(out);
  return result;
}

}  // namespace llmk::conformance
