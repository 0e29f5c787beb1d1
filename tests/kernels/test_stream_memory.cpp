#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/stream_memory.hpp"
#include "support/skip.hpp"

using namespace llmk::kernels::cpu;

namespace {

struct Block {
  uint8_t* p;
  size_t bytes;
  uint8_t seed;
};

void fill(const Block& b) {
  for (size_t i = 0; i < b.bytes; i += 997) b.p[i] = static_cast<uint8_t>(b.seed + i);
  b.p[b.bytes - 1] = static_cast<uint8_t>(~b.seed);
}

bool intact(const Block& b) {
  for (size_t i = 0; i < b.bytes - 1; i += 997)
    if (b.p[i] != static_cast<uint8_t>(b.seed + i)) return false;
  return b.p[b.bytes - 1] == static_cast<uint8_t>(~b.seed);
}

// AnonHugePages of the mappings that overlap [p, p + bytes), from /proc/self/smaps.
size_t huge_page_bytes(const void* p, size_t bytes) {
  std::ifstream f("/proc/self/smaps");
  const auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
  size_t total = 0;
  bool inside = false;
  std::string line;
  while (std::getline(f, line)) {
    // A mapping's header ("begin-end perms ...") starts its block of fields.
    const size_t dash = line.find('-'), space = line.find(' ');
    unsigned long begin = 0, end = 0;
    if (dash < space && space != std::string::npos && std::sscanf(line.c_str(), "%lx-%lx", &begin, &end) == 2) {
      inside = begin < hi && end > lo;
      continue;
    }
    size_t kib = 0;
    if (inside && std::sscanf(line.c_str(), "AnonHugePages: %zu kB", &kib) == 1) total += kib * 1024;
  }
  return total;
}

// The system's transparent huge page mode: "always", "madvise", "never" or "" if unknown.
std::string thp_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  const size_t a = line.find('['), b = line.find(']');
  return a != std::string::npos && b > a ? line.substr(a + 1, b - a - 1) : "";
}

}  // namespace

TEST_CASE("stream memory blocks are aligned, disjoint and keep their bytes while others come and go", "[stream_memory]") {
  // Sizes from one byte to dedicated mappings, so blocks share chunks, fill
  // them, open new ones and get mappings of their own.
  const std::vector<size_t> sizes = {1, 64, 100, 4096, 300000, 1 << 20, 5 << 20, 9 << 20, 12 << 20, 40 << 20, 700000};
  std::mt19937 rng(7);
  std::vector<Block> live;
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < sizes.size() * 3; ++i) {
      const size_t bytes = sizes[rng() % sizes.size()];
      Block b{static_cast<uint8_t*>(stream_alloc(bytes)), bytes, static_cast<uint8_t>(rng())};
      REQUIRE(b.p != nullptr);
      CHECK(reinterpret_cast<uintptr_t>(b.p) % kStreamAlignment == 0);
      if (kStreamMappings && bytes >= kStreamDedicatedBytes) CHECK(reinterpret_cast<uintptr_t>(b.p) % (2u << 20) == 0);
      fill(b);
      live.push_back(b);
    }
    // Free about half, in random order; every other block keeps its bytes.
    std::shuffle(live.begin(), live.end(), rng);
    const size_t keep = live.size() / 2;
    for (size_t i = keep; i < live.size(); ++i) stream_free(live[i].p);
    live.resize(keep);
    for (const Block& b : live) CHECK(intact(b));
    std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
    for (const Block& b : live)
      ranges.emplace_back(reinterpret_cast<uintptr_t>(b.p), reinterpret_cast<uintptr_t>(b.p) + b.bytes);
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) CHECK(ranges[i - 1].second <= ranges[i].first);
  }
  for (const Block& b : live) stream_free(b.p);
  stream_free(nullptr);
}

TEST_CASE("StreamArray holds count elements of stream memory and frees it", "[stream_memory]") {
  StreamArray<float> a(1000);
  REQUIRE(a.size() == 1000);
  CHECK(a.bytes() == 4000);
  CHECK(reinterpret_cast<uintptr_t>(a.data()) % kStreamAlignment == 0);
  for (size_t i = 0; i < a.size(); ++i) a.data()[i] = static_cast<float>(i);
  StreamArray<float> b = std::move(a);
  CHECK(b.data()[999] == 999.0f);
  CHECK(StreamArray<int>().data() == nullptr);
}

TEST_CASE("an impossible stream memory size is refused, not wrapped around", "[stream_memory]") {
  // A corrupt shape's product: rounding it up to a page or multiplying it by
  // the element size must not wrap into a small block.
  CHECK_THROWS_AS(stream_alloc(SIZE_MAX), std::bad_alloc);
  CHECK_THROWS_AS(stream_alloc(SIZE_MAX - 100), std::bad_alloc);
  CHECK_THROWS_AS(StreamArray<float>(SIZE_MAX / 2), std::bad_alloc);
  // The pool still serves afterwards.
  StreamArray<float> ok(16);
  ok.data()[15] = 1.0f;
  CHECK(ok.data()[15] == 1.0f);
}

TEST_CASE("a large stream block is backed by huge pages where the system offers them", "[stream_memory]") {
  if (!kStreamMappings) LLMK_SKIP("stream memory is plain heap memory in this build (not Linux, or AddressSanitizer)");
  const std::string mode = thp_mode();
  if (mode != "always" && mode != "madvise")
    LLMK_SKIP("transparent huge pages are '" + mode + "' here (need always or madvise)");
  // 16 MiB from a 2 MiB boundary: eight whole huge pages, touched once each.
  const size_t bytes = size_t{16} << 20;
  StreamArray<uint8_t> a(bytes);
  for (size_t i = 0; i < bytes; i += 4096) a.data()[i] = 1;
  const size_t huge = huge_page_bytes(a.data(), bytes);
  INFO("AnonHugePages over the block's mapping: " << huge << " bytes");
  CHECK(huge >= (size_t{2} << 20));
}
