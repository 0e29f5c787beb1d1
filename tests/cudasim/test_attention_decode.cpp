// kernels/cuda/attention_decode under the simulation, against the float64
// reference of attention_reference.hpp: GQA ratios (up to 12, over two head
// chunks), block sizes, KV dtypes (I8 with several group sizes), activation
// dtypes, head_dim up to 256, sliding windows, contexts from 1 to ~3000
// tokens, split counts from 1 to more than the keys need, steps mixing
// prefills (whose output rows must keep their bytes) with decodes, and a CUDA
// graph replayed over longer contexts than it was captured with.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "attention_reference.hpp"
#include "kernels/cuda/attention_decode.hpp"
#include "kernels/cuda/attention_paged.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;
namespace cuda = llmk::cuda;

namespace {

// Everything in f32, as attention_paged: the f32 dot products, f32 running
// sums of up to ~3000 weighted values, the merge of up to 94 splits
// (absolute, relative to the largest |v| the query sees; the largest error
// observed in the simulation is 2.3e-7, 0.4% of the bound). On the GPU __expf is off by up to 2 + 1.17 |x| ulp; with
// score differences up to ~40 that is ~50 ulp, ~3e-6, on each weight and on
// each split's rescale in the merge: `weight`.
constexpr attention_tolerance kDecodeTolerance{5e-5, 0.0, 1e-5, 0.0};

bool is_decode(const seq_spec& s) { return s.query_len == 1; }

// The KV write, then the decode kernel with num_splits. The workspace lives
// as long as the launch object and is filled with NaN bytes before every
// launch, so a merge reading a split that was not written this time fails.
attention_sink_launch decode_launch(int32_t num_splits) {
  auto workspace = std::make_shared<std::unique_ptr<device_buffer<uint8_t>>>();
  return [num_splits, workspace](const cuda::PagedAttentionShape& shape, const cuda::PagedAttentionStep& step,
                                 const void* q, const void* q_sink, const void* k, const void* v,
                                 const cuda::PagedKvCache& cache, void* out, cudaStream_t stream) -> cudaError_t {
    const size_t bytes = cuda::attention_decode_workspace_bytes(shape, step.num_seqs, num_splits);
    if (bytes > 0 && *workspace == nullptr) *workspace = std::make_unique<device_buffer<uint8_t>>(bytes);
    void* ws = bytes > 0 ? (*workspace)->get() : nullptr;
    if (bytes > 0)
      if (const cudaError_t status = cudaMemsetAsync(ws, 0xff, bytes, stream); status != cudaSuccess) return status;
    if (const cudaError_t status = cuda::kv_cache_write(shape, step, k, v, cache, stream); status != cudaSuccess)
      return status;
    return cuda::attention_decode(shape, step, q, cache, out, ws, bytes, num_splits, stream, q_sink);
  };
}

void check_decode_case(const attention_case& c, int32_t num_splits) {
  INFO("num_splits " << num_splits);
  check_attention_case(c, decode_launch(num_splits), kDecodeTolerance, is_decode);
}

// Decodes (one of a one-token context), a prefill chunk on a cached prefix, a
// fresh prefill and a sequence with no new rows: the decode kernel writes the
// output rows of the decodes only.
std::vector<seq_spec> mixed_short_step() { return {{37, 1}, {50, 7}, {5, 5}, {1, 1}, {20, 0}, {70, 1}}; }

}  // namespace

TEST_CASE("Decode attention matches float64 over GQA ratios, block sizes, KV dtypes and sliding windows") {
  LLMK_SKIP_WHEN_SANITIZED(kSanitizedGridReason);
  // head_dim 24: small, as the simulation tracks every shared-memory access; head_dims have their own test.
  for_each_grid_case(mixed_short_step(), 24, {LLMK_DTYPE_F32, LLMK_DTYPE_F16, LLMK_DTYPE_BF16, LLMK_DTYPE_I8},
                     {0, 6}, 1100, [](const attention_case& c) {
                       // One split, and three: without a window the longest decode (70
                       // keys) then has splits of 32 keys, of which the 37-key sequence
                       // uses two.
                       check_decode_case(c, 1);
                       check_decode_case(c, 3);
                     });
}

TEST_CASE("Decode attention matches float64 with several KV heads: GQA 8/4, 16/2 and 32/8") {
  LLMK_SKIP_WHEN_SANITIZED(kSanitizedGridReason);
  for_each_kv_heads_case(mixed_short_step(), 16, {LLMK_DTYPE_BF16, LLMK_DTYPE_I8}, {0, 6}, 1150,
                         [](const attention_case& c) {
                           check_decode_case(c, 1);
                           check_decode_case(c, 3);
                         });
}

TEST_CASE("Decode attention scores the sinks with q_sink, with and without a window, GQA up to 32/8") {
  for_each_sink_case(mixed_short_step(), 16, {LLMK_DTYPE_F32, LLMK_DTYPE_BF16, LLMK_DTYPE_I8}, 1900,
                     [](const attention_case& c) {
                       // Three splits: without a window the 70-key decode's first split
                       // holds the sinks and positions 4..31.
                       check_decode_case(c, 1);
                       check_decode_case(c, 3);
                     });
}

TEST_CASE("Decode attention splits long contexts with sinks before a window: the sinks lead the first split") {
  std::uint64_t data_seed = 1950;
  for (const int window : {0, 500}) {
    attention_case c;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 32;
    c.block_size = 16;
    c.kv_dtype = LLMK_DTYPE_BF16;
    c.sliding_window = window;
    c.sink_tokens = 5;
    c.seqs = {{1501, 1}, {600, 1}, {3, 1}};
    c.data_seed = ++data_seed;
    check_decode_case(c, 4);
  }
}

// The K tile, q and q_sink of eight heads at head_dim 256 take 49,664 bytes
// of dynamic shared memory, past the 48 KiB a launch gets by default.
TEST_CASE("Decode attention with sinks at head_dim 256 and eight query heads a block raises its shared memory limit") {
  attention_case c;
  c.num_heads = 8;
  c.num_kv_heads = 1;
  c.head_dim = 256;
  c.block_size = 16;
  c.kv_dtype = LLMK_DTYPE_BF16;
  c.sink_tokens = 4;
  c.seqs = {{40, 1}, {3, 1}};
  c.data_seed = 1990;
  check_decode_case(c, 1);
}

// A few keys of one split outscore every other key by more than 88, so the
// other splits' weights are below f32's smallest exp(-x) and a merge that
// rescales against any maximum but the largest overflows exp().
TEST_CASE("Decode attention merges splits whose maxima lie more than 88 apart") {
  LLMK_SKIP_WHEN_SANITIZED(kSanitizedGridReason);
  attention_case c;
  c.num_heads = 2;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.block_size = 16;
  c.kv_dtype = LLMK_DTYPE_BF16;
  c.seqs = {{3001, 1}, {777, 1}, {40, 1}};
  c.boost_first = 520;
  c.boost_count = 6;
  c.boost = 10.0f;
  c.data_seed = 1250;
  {
    // The gap, from the case's own data: every boosted key against every
    // other key of the two long sequences, for each query head.
    const attention_problem pb = make_attention_problem(c);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
    for (int s = 0; s < 2; ++s)
      for (int h = 0; h < c.num_heads; ++h) {
        double boosted = INFINITY, others = -INFINITY;
        const int t = pb.query_start[s + 1] - 1;
        for (int p = 0; p < c.seqs[s].context_len; ++p) {
          double dot = 0.0;
          for (int d = 0; d < c.head_dim; ++d)
            dot += pb.q.value[(static_cast<std::size_t>(t) * c.num_heads + h) * c.head_dim + d] *
                   pb.cache_after.k_value[static_cast<std::size_t>(pb.slot_of(s, p)) * pb.row + h * c.head_dim + d];
          const bool is_boosted = p >= c.boost_first && p < c.boost_first + c.boost_count;
          if (is_boosted) boosted = std::min(boosted, dot * scale);
          else others = std::max(others, dot * scale);
        }
        INFO("sequence " << s << " head " << h << ": boosted keys score " << boosted << ", the others at most " << others);
        REQUIRE(boosted - others > 88.0);
      }
  }
  // 3001 keys: 7 splits of 14 tiles (448 keys) put keys 520.. in the second;
  // 64 and 94 splits, one or two tiles each, leave them alone in theirs.
  for (const int32_t num_splits : {2, 7, 64, 94}) check_decode_case(c, num_splits);
}

TEST_CASE("Decode attention gives the float64 result for 1, 2, 7 and many splits, and more splits than tiles") {
  LLMK_SKIP_WHEN_SANITIZED(kSanitizedGridReason);
  std::uint64_t data_seed = 1200;
  attention_case c;
  c.num_heads = 4;
  c.num_kv_heads = 1;
  c.head_dim = 32;
  c.block_size = 16;
  c.kv_dtype = LLMK_DTYPE_BF16;
  // Several thousand keys, an odd context, a short one and a one-token one.
  c.seqs = {{3001, 1}, {1, 1}, {777, 1}, {2048, 1}};
  c.data_seed = ++data_seed;
  // 3001 keys are 94 tiles. 64 splits get 2 tiles each, and 47 of them
  // hold keys; 200 splits get one tile each, and 106 of them find no keys
  // in any sequence.
  for (const int32_t num_splits : {1, 2, 7, 64, 200}) check_decode_case(c, num_splits);
}

TEST_CASE("Decode attention handles head_dim 8 to 256, and GQA ratios beyond one block's heads") {
  std::uint64_t data_seed = 1300;
  for (const int head_dim : {8, 64, 80, 128, 256}) {
    attention_case c;
    c.num_heads = 16;
    c.num_kv_heads = 2;
    c.head_dim = head_dim;
    c.block_size = 16;
    c.kv_dtype = LLMK_DTYPE_BF16;
    c.seqs = {{19, 1}, {40, 3}, {75, 1}};
    c.data_seed = ++data_seed;
    check_decode_case(c, 2);
  }
  // Group 12: a block of 8 query heads and one of 4 per KV head.
  attention_case c;
  c.num_heads = 24;
  c.num_kv_heads = 2;
  c.head_dim = 40;
  c.block_size = 32;
  c.kv_dtype = LLMK_DTYPE_F16;
  c.sliding_window = 50;
  c.seqs = {{19, 1}, {130, 1}, {12, 4}};
  c.data_seed = ++data_seed;
  check_decode_case(c, 1);
  check_decode_case(c, 4);
}

TEST_CASE("Decode attention with bf16 and f16 activations rounds only its output") {
  std::uint64_t data_seed = 1400;
  for (const llmk_dtype activation : {LLMK_DTYPE_BF16, LLMK_DTYPE_F16})
    for (const llmk_dtype kv_dtype : {LLMK_DTYPE_F32, LLMK_DTYPE_F16, LLMK_DTYPE_BF16, LLMK_DTYPE_I8}) {
      attention_case c;
      c.num_heads = 4;
      c.num_kv_heads = 2;
      c.head_dim = 80;
      c.block_size = 16;
      c.activation_dtype = activation;
      c.kv_dtype = kv_dtype;
      c.kv_group_size = kv_dtype == LLMK_DTYPE_I8 ? 16 : 0;
      c.sliding_window = 9;
      c.seqs = {{30, 1}, {21, 4}, {8, 1}};
      c.data_seed = ++data_seed;
      check_decode_case(c, 1);
    }
}

TEST_CASE("Decode attention reads I8 caches with groups of 8, 16, 32 and a whole head") {
  std::uint64_t data_seed = 1500;
  for (const int group_size : {8, 16, 32, 64}) {
    attention_case c;
    c.num_heads = 8;
    c.num_kv_heads = 2;
    c.head_dim = 64;
    c.block_size = 16;
    c.kv_dtype = LLMK_DTYPE_I8;
    c.kv_group_size = group_size;
    c.activation_dtype = group_size == 16 ? LLMK_DTYPE_BF16 : LLMK_DTYPE_F32;
    c.sliding_window = group_size == 32 ? 40 : 0;
    c.seqs = {{200, 1}, {33, 5}, {1, 1}, {97, 1}};
    c.data_seed = ++data_seed;
    check_decode_case(c, 4);
  }
}

TEST_CASE("Decode attention over contexts of ~3000 tokens, window on and off, one block or many") {
  LLMK_SKIP_WHEN_SANITIZED(kSanitizedGridReason);
  std::uint64_t data_seed = 1600;
  for (const int block_size : {16, 0})
    for (const int window : {0, 1000}) {
      attention_case c;
      c.num_heads = 2;
      c.num_kv_heads = 1;
      c.head_dim = 64;
      c.block_size = block_size;
      c.kv_dtype = window == 0 ? LLMK_DTYPE_BF16 : LLMK_DTYPE_F32;
      c.sliding_window = window;
      c.seqs = {{3001, 1}, {2903, 2}, {1500, 1}};
      c.data_seed = ++data_seed;
      // The split count the host would choose for this step (a window caps
      // the keys a decode sees).
      const int32_t longest = window > 0 ? window : 3001;
      check_decode_case(c, cuda::attention_decode_num_splits(longest, 3, c.num_kv_heads, 0));
    }
}

TEST_CASE("Decode attention leaves every row alone in a step of prefills only") {
  attention_case c;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.seqs = {{9, 9}, {30, 4}, {6, 0}};
  c.data_seed = 1700;
  check_decode_case(c, 1);
  check_decode_case(c, 5);
}

// The partition is derived on the device from the step, so a graph captured
// with a split count serves longer contexts than it saw at capture. The
// cache holds a step of long contexts; the graph is captured while
// context_lens says shorter ones, replayed, then replayed after context_lens
// is rewritten with the long ones and again with the short ones. With the
// short step's partition (96 keys) baked in, four splits would miss most of
// the 900-key context.
TEST_CASE("A captured decode graph stays right when the step's contexts grow") {
  attention_case longer;
  longer.num_heads = 8;
  longer.num_kv_heads = 2;
  longer.head_dim = 32;
  longer.block_size = 16;
  longer.kv_dtype = LLMK_DTYPE_BF16;
  longer.seqs = {{900, 1}, {1, 1}, {333, 1}, {640, 1}};
  longer.data_seed = 1800;
  attention_case shorter = longer;
  shorter.seqs = {{300, 1}, {1, 1}, {100, 1}, {77, 1}};
  const attention_problem pb = make_attention_problem(longer);
  const attention_expectation want_longer = reference_attention(longer, pb, kDecodeTolerance);
  const attention_expectation want_shorter = reference_attention(shorter, pb, kDecodeTolerance);
  const std::vector<int32_t> context_lens_shorter = {300, 1, 100, 77};

  const int32_t num_splits = 4;
  const cuda::PagedAttentionShape shape{longer.num_heads, longer.num_kv_heads, longer.head_dim,
                                        static_cast<float>(1.0 / std::sqrt(static_cast<double>(longer.head_dim))),
                                        0,                cuda::DType::f32,    cuda::DType::bf16};
  const size_t workspace_bytes = cuda::attention_decode_workspace_bytes(shape, pb.num_seqs, num_splits);
  const std::vector<uint8_t> out_before(pb.q.bytes.size(), 0xa7);
  for (auto seed : seeds) {
    reset_simulator(seed);
    cudaStream_t stream;
    CUDA_REQUIRE(cudaStreamCreate(&stream));
    device_buffer<uint8_t> dq(pb.q.bytes), dk_cache(pb.cache_after.k), dv_cache(pb.cache_after.v), dout(out_before);
    device_buffer<uint8_t> workspace(workspace_bytes);
    device_buffer<int32_t> dquery_start(pb.query_start), dcontext_lens(context_lens_shorter), dslots(pb.slot_mapping),
        dtables(pb.block_tables);
    const cuda::PagedAttentionStep step{pb.num_tokens,      pb.num_seqs,         pb.max_blocks_per_seq,
                                        pb.block_size,      dquery_start.get(),  dcontext_lens.get(),
                                        dslots.get(),       dtables.get()};
    cudaGraph_t graph;
    CUDA_REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    CUDA_REQUIRE(cuda::attention_decode(shape, step, dq.get(), cuda::PagedKvCache{dk_cache.get(), dv_cache.get()},
                                        dout.get(), workspace.get(), workspace_bytes, num_splits, stream));
    CUDA_REQUIRE(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec;
    CUDA_REQUIRE(cudaGraphInstantiate(&exec, graph, 0));
    for (const bool grown : {false, true, false}) {
      INFO("seed " << seed << (grown ? " longer contexts" : " contexts of the capture"));
      dcontext_lens.upload(grown ? pb.context_lens : context_lens_shorter);
      dout.upload(out_before);
      CUDA_REQUIRE(cudaGraphLaunch(exec, stream));
      CUDA_REQUIRE(cudaStreamSynchronize(stream));
      REQUIRE_NO_SIMULATED_RACES();
      const attention_expectation& want = grown ? want_longer : want_shorter;
      const auto out = dout.download();
      for (std::size_t e = 0; e < want.want.size(); ++e) {
        float got;
        std::memcpy(&got, &out[e * sizeof(float)], sizeof(float));
        INFO("output element " << e << " got " << got << " want " << want.want[e] << " bound " << want.bound[e]);
        REQUIRE(std::abs(got - want.want[e]) <= want.bound[e]);
      }
    }
    CUDA_REQUIRE(cudaGraphExecDestroy(exec));
    CUDA_REQUIRE(cudaGraphDestroy(graph));
    CUDA_REQUIRE(cudaStreamDestroy(stream));
  }
}

TEST_CASE("The split count is a power of two that fills the SMs without splits under 256 keys") {
  for (const int32_t num_sms : {0, 108, 132})
    for (const int32_t num_seqs : {1, 2, 8, 64, 256})
      for (const int32_t num_kv_heads : {1, 8, 32})
        for (const int32_t context : {0, 1, 255, 256, 511, 2048, 4096, 32768}) {
          INFO("sms " << num_sms << " seqs " << num_seqs << " kv heads " << num_kv_heads << " context " << context);
          const int32_t n = cuda::attention_decode_num_splits(context, num_seqs, num_kv_heads, num_sms);
          REQUIRE(n >= 1);
          REQUIRE((n & (n - 1)) == 0);
          if (n > 1) REQUIRE(context / n >= cuda::kDecodeMinPartitionKeys);
          // Doubling would either cut splits below the minimum or not be
          // needed: n - 1 more blocks per (sequence, KV head) already reach
          // the target of kDecodeBlocksPerSm per SM.
          const int64_t sms = num_sms > 0 ? num_sms : cuda::kDecodeDefaultSmCount;
          const int64_t base = int64_t{num_seqs} * num_kv_heads, target = sms * cuda::kDecodeBlocksPerSm;
          REQUIRE((context / (2 * n) < cuda::kDecodeMinPartitionKeys || (2 * n - 1) * base >= target));
        }
  // The figures of docs/cuda_kernels.md (llama2-7b, 32 KV heads, context 2048, an H100's 132 SMs).
  REQUIRE(cuda::attention_decode_num_splits(2048, 1, 32, 132) == 8);
  REQUIRE(cuda::attention_decode_num_splits(2048, 64, 32, 132) == 1);
}

TEST_CASE("Decode attention sizes its workspace and rejects what it cannot serve") {
  cuda::PagedAttentionShape shape{8, 2, 64, 0.125f, 0, cuda::DType::f32, cuda::DType::f32};
  REQUIRE(cuda::attention_decode_workspace_bytes(shape, 5, 1) == 0);
  REQUIRE(cuda::attention_decode_workspace_bytes(shape, 5, 3) == size_t{5} * 8 * 3 * (64 + 2) * sizeof(float));

  device_buffer<int32_t> query_start(std::vector<int32_t>{0, 1}), context_lens(std::vector<int32_t>{1}),
      tables(std::vector<int32_t>{0});
  cuda::PagedAttentionStep step;
  step.num_tokens = 1;
  step.num_seqs = 1;
  step.max_blocks_per_seq = 1;
  step.block_size = 16;
  step.query_start = query_start.get();
  step.context_lens = context_lens.get();
  step.block_tables = tables.get();
  const cuda::PagedKvCache cache{nullptr, nullptr};
  const size_t two_splits = cuda::attention_decode_workspace_bytes(shape, 1, 2);
  REQUIRE(cuda::attention_decode(shape, step, nullptr, cache, nullptr, nullptr, 0, 0, nullptr) ==
          cudaErrorInvalidValue);  // no split
  REQUIRE(cuda::attention_decode(shape, step, nullptr, cache, nullptr, nullptr, two_splits - 4, 2, nullptr) ==
          cudaErrorInvalidValue);  // workspace too small
  REQUIRE(cuda::attention_decode(shape, step, nullptr, cache, nullptr, nullptr, two_splits, 2, nullptr) ==
          cudaErrorInvalidValue);  // no workspace
  shape.kv_dtype = cuda::DType::i8;
  shape.kv_group_size = 16;
  REQUIRE(cuda::attention_decode(shape, step, nullptr, cache, nullptr, nullptr, 0, 1, nullptr) ==
          cudaErrorInvalidValue);  // I8 without scales
  shape.kv_group_size = 48;
  REQUIRE(cuda::attention_decode(shape, step, nullptr, cache, nullptr, nullptr, 0, 1, nullptr) ==
          cudaErrorInvalidValue);  // 48 does not divide 64
  shape.kv_dtype = cuda::DType::f32;
  shape.num_kv_heads = 3;
  REQUIRE(cuda::attention_decode(shape, step, nullptr, cache, nullptr, nullptr, 0, 1, nullptr) ==
          cudaErrorInvalidValue);  // 3 does not divide 8
  shape.num_kv_heads = 2;
  step.num_seqs = 0;
  REQUIRE(cuda::attention_decode(shape, step, nullptr, cache, nullptr, nullptr, 0, 1, nullptr) == cudaSuccess);
}
