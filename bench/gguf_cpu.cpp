// Speed of the GGUF-native linear kernels (kernels/cpu/linear_gguf.hpp) on
// a model's matrix shapes (--shapes: llama-110m, the default, or
// tinyllama-1.1b, or both, comma-separated).
//
//   bench_gguf_cpu[_<level>] [--types q8_0,q4_k,q5_k,q6_k] [--shapes llama-110m] [--threads 2] [--reps 15]
//
// Per type and shape (out x in): one row (decode), as GB/s of packed weight
// streamed from memory (copies of the matrix in turn, over 256 MiB in all,
// so no pass finds it in the cache) beside the read bandwidth probed right
// before (bench/limits.hpp); and 128 rows (prefill), as GOP/s (2 out in rows
// operations per pass, the weight cached after the first tile). Each figure
// is printed for the median and for the fastest of --reps passes: on a
// shared machine a pass whose thread waits for a core takes a scheduler tick
// or two longer, and the fastest pass is the kernel's own speed. The load
// average is printed first. bench_gguf_cpu is the baseline build's kernels;
// bench_gguf_cpu_<level> each higher CPU level's.
#include <stdlib.h>  // getloadavg

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/limits.hpp"
#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/linear_gguf.hpp"
#include "kernels/cpu/stream_memory.hpp"

namespace {

using llmk::kernels::cpu::GgufQuant;

struct Named {
  const char* name;
  GgufQuant type;
  int d_at;  // where each block's f16 scale sits (set to a sane value: random bytes may be NaN)
};
const Named kTypes[] = {{"q4_0", GgufQuant::q4_0, 0}, {"q4_1", GgufQuant::q4_1, 0}, {"q5_0", GgufQuant::q5_0, 0},
                        {"q5_1", GgufQuant::q5_1, 0}, {"q8_0", GgufQuant::q8_0, 0}, {"q4_k", GgufQuant::q4_k, 0},
                        {"q5_k", GgufQuant::q5_k, 0}, {"q6_k", GgufQuant::q6_k, 208}};

struct Shape {
  int64_t out, in;
  const char* what;
};
struct Model {
  const char* name;
  std::vector<Shape> shapes;
};
const Model kModels[] = {
    {"llama-110m",
     {{768, 768, "attn out"}, {2304, 768, "qkv"}, {4096, 768, "gate/up"}, {768, 2048, "down"},
      {32000, 768, "lm head"}}},
    {"tinyllama-1.1b",
     {{2048, 2048, "attn out"}, {2560, 2048, "qkv"}, {11264, 2048, "gate/up"}, {2048, 5632, "down"},
      {32000, 2048, "lm head"}}}};

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) items.push_back(item);
  return items;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double fastest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

template <class F>
double seconds(const F& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace llmk::kernels::cpu;
  std::vector<std::string> types{"q8_0", "q4_k", "q5_k", "q6_k"}, models{"llama-110m"};
  int threads = 2, reps = 15;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--types") {
      types = split(v);
    } else if (k == "--shapes") {
      models = split(v);
    } else if (k == "--threads") {
      threads = std::stoi(v);
    } else if (k == "--reps") {
      reps = std::stoi(v);
    } else {
      std::fprintf(stderr, "bench_gguf_cpu: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  double load[3] = {};
  getloadavg(load, 3);
  std::vector<const Model*> chosen;
  for (const std::string& name : models) {
    const Model* model = nullptr;
    for (const auto& m : kModels)
      if (name == m.name) model = &m;
    if (model == nullptr) {
      std::fprintf(stderr, "bench_gguf_cpu: unknown shapes %s (llama-110m, tinyllama-1.1b)\n", name.c_str());
      return 2;
    }
    chosen.push_back(model);
  }
  std::printf("threads %d, reps %d, load average %.2f %.2f %.2f\n", threads, reps, load[0], load[1], load[2]);
  llmk::bench::ReadBandwidthProbe probe;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal;
  for (const std::string& name : types) {
    const Named* nt = nullptr;
    for (const auto& t : kTypes)
      if (name == t.name) nt = &t;
    if (nt == nullptr) {
      std::fprintf(stderr, "bench_gguf_cpu: unknown type %s\n", name.c_str());
      return 2;
    }
    const GgufQuant t = nt->type;
    for (const Model* model : chosen) {
      std::printf("%s, %s (median | fastest)\n  %-8s %11s %17s %13s %15s %17s %13s\n", name.c_str(), model->name,
                  "shape", "out x in", "1 row us", "GB/s", "of read", "128 rows us", "GOP/s");
      for (const Shape& s : model->shapes) {
        const int64_t nb = s.out * s.in / gguf_block_elems(t);
        const size_t bb = gguf_block_bytes(t);
        std::vector<uint8_t> blocks(nb * bb);
        for (auto& b : blocks) b = static_cast<uint8_t>(byte(rng));
        for (int64_t b = 0; b < nb; ++b) {
          const uint16_t d = f32_to_f16(0.01f), m = f32_to_f16(-0.05f);
          std::memcpy(&blocks[b * bb + nt->d_at], &d, 2);
          if (t == GgufQuant::q4_1 || t == GgufQuant::q5_1 || t == GgufQuant::q4_k || t == GgufQuant::q5_k)
            std::memcpy(&blocks[b * bb + 2], t == GgufQuant::q4_k || t == GgufQuant::q5_k ? &d : &m, 2);
        }
        const size_t packed_bytes = gguf_packed_size(t, s.out, s.in);
        const int copies = static_cast<int>(std::max<size_t>(2, (size_t{256} << 20) / packed_bytes + 1));
        std::vector<StreamArray<uint8_t>> packed;
        for (int c = 0; c < copies; ++c) {
          packed.emplace_back(packed_bytes);
          gguf_pack(t, blocks.data(), s.out, s.in, packed.back().data(), threads);
        }
        const int64_t rows = 128;
        StreamArray<uint8_t> scratch(gguf_scratch_size(t, rows, s.in));
        std::vector<float> x(rows * s.in), y(rows * s.out);
        for (auto& v : x) v = normal(rng);
        // One row: each pass over the next copy.
        linear_gguf(t, x.data(), 1, s.in, packed[0].data(), s.out, y.data(), scratch.data(), threads);
        std::vector<double> gemv;
        const double bandwidth = probe.measure(threads, 5);
        for (int r = 0; r < std::max(reps, copies); ++r)
          gemv.push_back(seconds([&] {
            linear_gguf(t, x.data(), 1, s.in, packed[r % copies].data(), s.out, y.data(), scratch.data(), threads);
          }));
        std::vector<double> gemm;
        linear_gguf(t, x.data(), rows, s.in, packed[0].data(), s.out, y.data(), scratch.data(), threads);
        for (int r = 0; r < reps; ++r)
          gemm.push_back(seconds([&] {
            linear_gguf(t, x.data(), rows, s.in, packed[0].data(), s.out, y.data(), scratch.data(), threads);
          }));
        const double t1[2] = {median(gemv), fastest(gemv)}, t128[2] = {median(gemm), fastest(gemm)};
        double gbs[2], gops[2];
        for (int i = 0; i < 2; ++i) {
          gbs[i] = static_cast<double>(packed_bytes) / t1[i] / 1e9;
          gops[i] = 2.0 * rows * s.out * s.in / t128[i] / 1e9;
        }
        char dims[32];
        std::snprintf(dims, sizeof(dims), "%lldx%lld", static_cast<long long>(s.out), static_cast<long long>(s.in));
        std::printf("  %-8s %11s %8.1f|%8.1f %6.1f|%6.1f %6.0f%%|%6.0f%% %8.1f|%8.1f %6.1f|%6.1f\n", s.what, dims,
                    t1[0] * 1e6, t1[1] * 1e6, gbs[0], gbs[1], 100.0 * gbs[0] / bandwidth, 100.0 * gbs[1] / bandwidth,
                    t128[0] * 1e6, t128[1] * 1e6, gops[0], gops[1]);
      }
    }
  }
  return 0;
}
