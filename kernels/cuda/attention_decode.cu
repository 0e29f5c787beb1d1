// Paged decoding attention with split-K (contract in attention_decode.hpp).
#include "cuda_compat.hpp"
#include "attention_decode.hpp"

#include <algorithm>
#include <type_traits>

#include "device_common.hpp"
#include "dtype_dispatch.hpp"
#include "kv_access.hpp"

namespace llmk::cuda {
namespace {

constexpr int kWarps = kDecodeThreads / 32;
constexpr int kLanesPerKey = kDecodeThreads / kDecodeTileKeys;  // lanes sharing one key's dot products
constexpr int kColumnsPerThread = (kAttentionMaxHeadDim + kDecodeThreads - 1) / kDecodeThreads;
constexpr int kHeadsPerWarp = (kDecodeMaxHeadsPerBlock + kWarps - 1) / kWarps;
// Row padding of the K tile in shared memory: the kLanesPerKey lanes of a key
// read consecutive elements, and the 8 keys of a warp start 4 banks apart
// when head_dim is a multiple of 32, so a warp's reads hit 32 distinct banks.
constexpr int kKeyRowPad = 4;
static_assert(kDecodeTileKeys == 32, "the softmax gives each key of a tile one lane of a warp");
static_assert(kDecodeThreads % 32 == 0 && 32 % kLanesPerKey == 0, "a key's lanes lie in one warp");
// Dynamic shared memory a launch takes without raising the kernel's limit:
// 48 KiB less room for the static arrays.
constexpr size_t kDecodeDefaultDynamicShared = 44 * 1024;

struct DecodeArgs {
  const int32_t* query_start;   // [num_seqs + 1]
  const int32_t* context_lens;  // [num_seqs]
  const int32_t* block_tables;  // [num_seqs, max_blocks_per_seq]
  float* partial_acc;           // [num_seqs, num_heads, num_splits, head_dim]; null with one split
  float* partial_max;           // [num_seqs, num_heads, num_splits]
  float* partial_sum;           // [num_seqs, num_heads, num_splits]
  int32_t num_seqs, max_blocks_per_seq, block_size;
  int32_t num_heads, num_kv_heads, head_dim, sliding_window;
  int32_t sink_tokens;  // positions below it: seen by every later query, scored with q_sink
  int32_t num_splits, head_chunks;
  float scale;
};

__device__ __forceinline__ bool is_decode(const DecodeArgs& a, int seq) {
  return a.query_start[seq + 1] - a.query_start[seq] == 1;
}

// The keys the one query of a decode sees, in split order: its sinks
// [0, num_sinks), then [rest_first, context_len): the last W positions under
// a window W, less any sinks among them.
struct DecodeKeys {
  int num_sinks, rest_first;
  __host__ __device__ int visible(int context_len) const { return num_sinks + context_len - rest_first; }
  // The position of the i-th visible key.
  __host__ __device__ int position(int i) const { return i < num_sinks ? i : rest_first + (i - num_sinks); }
};

__host__ __device__ inline DecodeKeys decode_keys(int sliding_window, int sink_tokens, int context_len) {
  const int num_sinks = sink_tokens < context_len ? sink_tokens : context_len;
  const int window_first = sliding_window > 0 && context_len > sliding_window ? context_len - sliding_window : 0;
  return {num_sinks, window_first > num_sinks ? window_first : num_sinks};
}

__device__ __forceinline__ int visible_keys(const DecodeArgs& a, int context_len) {
  return decode_keys(a.sliding_window, a.sink_tokens, context_len).visible(context_len);
}

// P, the keys per split in this step: the longest decode's visible keys over
// num_splits, rounded up to whole tiles. Read from the step on the device
// (a strided pass and a block max), so both kernels agree on it and a graph
// replay with longer contexts gets the longer partition. Every thread of the
// block calls it (barriers). block_max is over floats: exact for contexts
// below 2^24 keys.
__device__ int partition_keys(const DecodeArgs& a, float* scratch) {
  constexpr int kWhole = 1 << 30;  // one split: the whole context, whatever its length
  if (a.num_splits == 1) return kWhole;
  int longest = 0;
  for (int s = threadIdx.x; s < a.num_seqs; s += blockDim.x)
    if (is_decode(a, s)) longest = max(longest, visible_keys(a, a.context_lens[s]));
  longest = static_cast<int>(device::block_max(static_cast<float>(longest), scratch));
  const int per_split = (longest + a.num_splits - 1) / a.num_splits;
  return max(1, (per_split + kDecodeTileKeys - 1) / kDecodeTileKeys) * kDecodeTileKeys;
}

// Splits that hold keys of a sequence seeing `visible` (>= 1) keys.
__device__ __forceinline__ int used_splits(int visible, int partition) { return 1 + (visible - 1) / partition; }

// q, out: [num_tokens, num_heads, head_dim]; k_cache, v_cache: [num_slots, num_kv_heads, head_dim].
// q_sink: as q, or null (q scores the sinks).
// Block (split, KV head * head_chunks + chunk, sequence); blockDim.x == kDecodeThreads.
// Dynamic shared memory: the K tile [kDecodeTileKeys, head_dim + kKeyRowPad],
// then q [heads of the block, head_dim], then with sinks q_sink (the same), f32.
//
// Per tile of kDecodeTileKeys keys, three barriers:
//   1. the K rows go to shared memory as f32 (consecutive threads read
//      consecutive elements of a row);
//   2. scores: kLanesPerKey lanes per key, each summing every
//      kLanesPerKey-th element for all the block's heads at once (each K
//      element read once; a sink's with the q_sink rows), then a shuffle
//      sum across those lanes;
//   3. online softmax, one warp per head and one lane per key; warp 0 also
//      looks up the next tile's slots;
//   4. each thread rescales its accumulators and adds the weighted V rows
//      for its columns (tid, tid + kDecodeThreads) and every head: V is read
//      once, coalesced, straight from the cache.
template <class T, class C>
__global__ void __launch_bounds__(kDecodeThreads, 1) attention_decode_kernel(const T* __restrict__ q,
                                        const T* __restrict__ q_sink, device::KvRead<C> k_cache,
                                        device::KvRead<C> v_cache, T* __restrict__ out, DecodeArgs a) {
  __shared__ float probs[kDecodeMaxHeadsPerBlock][kDecodeTileKeys];  // scores, then exp(score - running max)
  __shared__ float rescales[kDecodeMaxHeadsPerBlock];                // exp(previous max - new max) of the tile
  __shared__ float final_max[kDecodeMaxHeadsPerBlock], final_sum[kDecodeMaxHeadsPerBlock];
  __shared__ int32_t slots[2][kDecodeTileKeys];                      // this tile's and the next tile's
  __shared__ float scratch[device::kMaxWarpsPerBlock + 1];
  LLMK_DYNAMIC_SHARED(float, dynamic);

  const int split = blockIdx.x, seq = blockIdx.z, tid = threadIdx.x;
  if (!is_decode(a, seq)) return;  // the whole block leaves: a prefill's rows are another kernel's
  const int partition = partition_keys(a, scratch);
  const int context_len = a.context_lens[seq];
  const DecodeKeys keys_seen = decode_keys(a.sliding_window, a.sink_tokens, context_len);
  const int visible = keys_seen.visible(context_len);
  const int num_used = used_splits(visible, partition);
  if (split >= num_used) return;
  const int begin = split * partition;  // visible keys [begin, end), in split order
  const int end = begin + min(partition, visible - begin);

  const int head_dim = a.head_dim, key_stride = head_dim + kKeyRowPad;
  const int group = a.num_heads / a.num_kv_heads;
  const int kv_head = blockIdx.y / a.head_chunks, chunk = blockIdx.y % a.head_chunks;
  const int first_head = kv_head * group + chunk * kDecodeMaxHeadsPerBlock;
  const int num_heads_here = min(kDecodeMaxHeadsPerBlock, group - chunk * kDecodeMaxHeadsPerBlock);
  const int token = a.query_start[seq];
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks_per_seq;
  const int64_t kv_stride = static_cast<int64_t>(a.num_kv_heads) * head_dim;  // elements per slot
  const int64_t head_offset = static_cast<int64_t>(kv_head) * head_dim;
  float* keys = dynamic;                                  // [kDecodeTileKeys][key_stride]
  float* q_rows = dynamic + kDecodeTileKeys * key_stride;  // [num_heads_here][head_dim], q * scale
  float* q_sink_rows = q_rows + num_heads_here * head_dim;  // the same of q_sink, when there are sinks

  const int64_t q_offset = (static_cast<int64_t>(token) * a.num_heads + first_head) * head_dim;
  for (int e = tid; e < num_heads_here * head_dim; e += kDecodeThreads) {
    q_rows[e] = device::to_float(q[q_offset + e]) * a.scale;
    if (keys_seen.num_sinks > 0)
      q_sink_rows[e] = device::to_float((q_sink != nullptr ? q_sink : q)[q_offset + e]) * a.scale;
  }
  const auto slot_of = [&](int i) {  // the i-th visible key's slot
    if (i >= end) return -1;
    const int position = keys_seen.position(i);
    return table[position / a.block_size] + position % a.block_size;
  };
  if (tid < kDecodeTileKeys) slots[0][tid] = slot_of(begin + tid);
  __syncthreads();

  const int warp = tid / 32, lane = tid % 32;
  const int key = tid / kLanesPerKey, part = tid % kLanesPerKey;
  float running_max[kHeadsPerWarp], running_sum[kHeadsPerWarp];  // heads warp + i * kWarps; lane-uniform
  float acc[kColumnsPerThread][kDecodeMaxHeadsPerBlock];         // columns tid + c * kDecodeThreads
  for (int i = 0; i < kHeadsPerWarp; ++i) {
    running_max[i] = -INFINITY;
    running_sum[i] = 0.0f;
  }
  for (int c = 0; c < kColumnsPerThread; ++c)
    for (int g = 0; g < kDecodeMaxHeadsPerBlock; ++g) acc[c][g] = 0.0f;

  int buffer = 0;
  for (int tile = begin; tile < end; tile += kDecodeTileKeys, buffer ^= 1) {
    const int num_keys = min(kDecodeTileKeys, end - tile);
    const int32_t* tile_slots = slots[buffer];

    // 1. K rows, element e = j * head_dim + d of the tile at tid + n * kDecodeThreads.
    {
      int j = tid / head_dim, d = tid % head_dim;
      const int step_rows = kDecodeThreads / head_dim, step_cols = kDecodeThreads % head_dim;
      while (j < num_keys) {
        keys[j * key_stride + d] = k_cache.at(static_cast<int64_t>(tile_slots[j]) * kv_stride + head_offset + d);
        d += step_cols;
        j += step_rows;
        if (d >= head_dim) {
          d -= head_dim;
          ++j;
        }
      }
    }
    __syncthreads();

    // 2. Scores of every (key, head) pair of the tile.
    float dot[kDecodeMaxHeadsPerBlock];
    for (int g = 0; g < kDecodeMaxHeadsPerBlock; ++g) dot[g] = 0.0f;
    if (key < num_keys) {
      const float* k_row = keys + key * key_stride;
      const float* q_key = tile + key < keys_seen.num_sinks ? q_sink_rows : q_rows;
      for (int d = part; d < head_dim; d += kLanesPerKey) {
        const float kd = k_row[d];
        for (int g = 0; g < kDecodeMaxHeadsPerBlock; ++g)
          if (g < num_heads_here) dot[g] += q_key[g * head_dim + d] * kd;
      }
    }
    for (int g = 0; g < kDecodeMaxHeadsPerBlock; ++g) {
      if (g >= num_heads_here) break;  // the same for the whole block
      for (int offset = kLanesPerKey / 2; offset > 0; offset /= 2)
        dot[g] += __shfl_xor_sync(device::kFullWarpMask, dot[g], offset);
      if (part == 0) probs[g][key] = dot[g];
    }
    __syncthreads();

    // 3. Online softmax of each head over the tile; the next tile's slots.
    for (int i = 0; i < kHeadsPerWarp; ++i) {
      const int g = warp + i * kWarps;
      if (g >= num_heads_here) break;  // the same for the whole warp
      const float score = lane < num_keys ? probs[g][lane] : -INFINITY;
      const float new_max = fmaxf(running_max[i], device::warp_max(score));
      const float p = lane < num_keys ? __expf(score - new_max) : 0.0f;
      probs[g][lane] = p;
      const float rescale = __expf(running_max[i] - new_max);  // 0 on the first tile (running max -inf)
      running_sum[i] = running_sum[i] * rescale + device::warp_sum(p);
      running_max[i] = new_max;
      if (lane == 0) rescales[g] = rescale;
    }
    if (tid < kDecodeTileKeys) slots[buffer ^ 1][tid] = slot_of(tile + kDecodeTileKeys + tid);
    __syncthreads();

    // 4. Weighted V rows. The next tile's first barrier orders these reads
    // before the next writes of probs, rescales and slots[buffer].
    for (int c = 0; c < kColumnsPerThread; ++c) {
      const int d = tid + c * kDecodeThreads;
      if (d >= head_dim) break;
      for (int g = 0; g < kDecodeMaxHeadsPerBlock; ++g)
        if (g < num_heads_here) acc[c][g] *= rescales[g];
      for (int j = 0; j < num_keys; ++j) {
        const float vd = v_cache.at(static_cast<int64_t>(tile_slots[j]) * kv_stride + head_offset + d);
        for (int g = 0; g < kDecodeMaxHeadsPerBlock; ++g)
          if (g < num_heads_here) acc[c][g] += probs[g][j] * vd;
      }
    }
  }

  for (int i = 0; i < kHeadsPerWarp; ++i) {
    const int g = warp + i * kWarps;
    if (g < num_heads_here && lane == 0) {
      final_max[g] = running_max[i];
      final_sum[g] = running_sum[i];
    }
  }
  __syncthreads();

  // One split: the output. Several: this split's share, for the merge.
  const bool direct = num_used == 1;
  for (int c = 0; c < kColumnsPerThread; ++c) {
    const int d = tid + c * kDecodeThreads;
    if (d >= head_dim) break;
    for (int g = 0; g < kDecodeMaxHeadsPerBlock; ++g) {
      if (g >= num_heads_here) break;
      const int64_t head_row = static_cast<int64_t>(seq) * a.num_heads + first_head + g;
      if (direct)
        out[(static_cast<int64_t>(token) * a.num_heads + first_head + g) * head_dim + d] =
            device::from_float<T>(acc[c][g] / final_sum[g]);
      else
        a.partial_acc[(head_row * a.num_splits + split) * head_dim + d] = acc[c][g];
    }
  }
  if (!direct && tid < num_heads_here) {
    const int64_t at = (static_cast<int64_t>(seq) * a.num_heads + first_head + tid) * a.num_splits + split;
    a.partial_max[at] = final_max[tid];
    a.partial_sum[at] = final_sum[tid];
  }
}

// out: [num_tokens, num_heads, head_dim]. Block (query head, sequence);
// blockDim.x == kDecodeThreads, one head_dim element per thread. With splits
// i of maxima m_i, sums l_i and accumulators acc_i, and M = max m_i:
//   out = sum_i exp(m_i - M) acc_i / sum_i exp(m_i - M) l_i.
template <class T>
__global__ void __launch_bounds__(kDecodeThreads, 1) attention_decode_merge_kernel(T* __restrict__ out, DecodeArgs a) {
  __shared__ float scratch[device::kMaxWarpsPerBlock + 1];
  const int head = blockIdx.x, seq = blockIdx.y;
  if (!is_decode(a, seq)) return;
  const int partition = partition_keys(a, scratch);
  const int num_used = used_splits(visible_keys(a, a.context_lens[seq]), partition);
  if (num_used == 1) return;  // its only split wrote the output

  const int64_t first = (static_cast<int64_t>(seq) * a.num_heads + head) * a.num_splits;
  float max_all = -INFINITY;
  for (int i = 0; i < num_used; ++i) max_all = fmaxf(max_all, a.partial_max[first + i]);
  float total = 0.0f;
  for (int i = 0; i < num_used; ++i) total += a.partial_sum[first + i] * __expf(a.partial_max[first + i] - max_all);
  const float inv_total = 1.0f / total;
  T* out_row = out + (static_cast<int64_t>(a.query_start[seq]) * a.num_heads + head) * a.head_dim;
  for (int d = threadIdx.x; d < a.head_dim; d += kDecodeThreads) {
    float x = 0.0f;
    for (int i = 0; i < num_used; ++i)
      x += a.partial_acc[(first + i) * a.head_dim + d] * __expf(a.partial_max[first + i] - max_all);
    out_row[d] = device::from_float<T>(x * inv_total);
  }
}


int32_t head_chunks(const PagedAttentionShape& shape) {
  const int32_t group = shape.num_heads / shape.num_kv_heads;
  return (group + kDecodeMaxHeadsPerBlock - 1) / kDecodeMaxHeadsPerBlock;
}

}  // namespace

int32_t attention_decode_visible_keys(const PagedAttentionShape& shape, int32_t context_len) {
  return decode_keys(shape.sliding_window, shape.sink_tokens, context_len).visible(context_len);
}

size_t attention_decode_workspace_bytes(const PagedAttentionShape& shape, int32_t num_seqs, int32_t num_splits) {
  if (num_splits <= 1 || num_seqs <= 0 || shape.num_heads <= 0 || shape.head_dim <= 0) return 0;
  return static_cast<size_t>(num_seqs) * static_cast<size_t>(shape.num_heads) * static_cast<size_t>(num_splits) *
         (static_cast<size_t>(shape.head_dim) + 2) * sizeof(float);
}

// Why these numbers. A decode reads its K/V once and does ~1 FLOP per byte,
// so it is bound by memory bandwidth, and keeping an H100's HBM busy needs
// about 3.35 TB/s x ~0.7 us of latency ~ 2.3 MB in flight, ~18 KB per SM.
// One block of 128 threads issuing scalar cache loads keeps only a few KB in
// flight, so each SM wants several blocks: kDecodeBlocksPerSm = 4 (ptxas
// gives the kernel 83 registers per thread on sm_90a, 110 for I8, so an SM
// holds 5 of its blocks, 4 for I8; shared memory, ~19-23 KB at head_dim
// 128, allows more). Without splits, batch 1 of llama2-7b launches 32 blocks,
// one per KV head: a quarter of the SMs, each with one block. Splitting
// multiplies that, but every split costs the merge a write and a read of
// (head_dim + 2) floats per query head, plus a prologue (q, the partition);
// with at least kDecodeMinPartitionKeys = 256 keys per split, the partial
// results (written, then read by the merge) add 0.8% to the bytes a split
// reads from a bf16 cache at group 1 and 6% at group 8, and the prologue is
// amortized over 8 tiles. Powers of two: the executor keys a CUDA graph by
// the workspace size, which grows with the split count, so a bucket sees a
// handful of graphs as its contexts grow (1, 2, 4, 8, 16 splits for batch 1
// of llama2-7b).
int32_t attention_decode_num_splits(int32_t max_context_len, int32_t num_seqs, int32_t num_kv_heads,
                                    int32_t num_sms) {
  const int64_t sms = num_sms > 0 ? num_sms : kDecodeDefaultSmCount;
  const int64_t blocks = static_cast<int64_t>(std::max(num_seqs, 1)) * std::max(num_kv_heads, 1);
  const int64_t wanted = (sms * kDecodeBlocksPerSm + blocks - 1) / blocks;
  const int64_t longest = std::max(max_context_len, 0) / kDecodeMinPartitionKeys;
  const int64_t cap = std::min(wanted, longest);
  int32_t splits = 1;
  while (splits * int64_t{2} <= cap) splits *= 2;
  return splits;
}

cudaError_t attention_decode(const PagedAttentionShape& shape, const PagedAttentionStep& step, const void* q,
                             const PagedKvCache& cache, void* out, void* workspace, size_t workspace_bytes,
                             int32_t num_splits, cudaStream_t stream, const void* q_sink) {
  if (const cudaError_t status = check_paged_attention_shape(shape); status != cudaSuccess) return status;
  if (step.num_seqs < 0 || step.block_size <= 0 || num_splits < 1) return cudaErrorInvalidValue;
  if (shape.kv_dtype == DType::i8 && (cache.k_scale == nullptr || cache.v_scale == nullptr))
    return cudaErrorInvalidValue;
  if (step.num_seqs == 0) return cudaSuccess;
  constexpr int32_t kMaxGridYZ = 65535;
  const int32_t chunks = head_chunks(shape);
  if (step.num_seqs > kMaxGridYZ || static_cast<int64_t>(shape.num_kv_heads) * chunks > kMaxGridYZ ||
      shape.num_heads > kMaxGridYZ)
    return cudaErrorInvalidValue;
  const size_t needed = attention_decode_workspace_bytes(shape, step.num_seqs, num_splits);
  if (workspace_bytes < needed || (needed > 0 && workspace == nullptr)) return cudaErrorInvalidValue;

  DecodeArgs args{};
  args.query_start = step.query_start;
  args.context_lens = step.context_lens;
  args.block_tables = step.block_tables;
  if (num_splits > 1) {
    const size_t num_rows = static_cast<size_t>(step.num_seqs) * shape.num_heads * num_splits;
    args.partial_acc = static_cast<float*>(workspace);
    args.partial_max = args.partial_acc + num_rows * shape.head_dim;
    args.partial_sum = args.partial_max + num_rows;
  }
  args.num_seqs = step.num_seqs;
  args.max_blocks_per_seq = step.max_blocks_per_seq;
  args.block_size = step.block_size;
  args.num_heads = shape.num_heads;
  args.num_kv_heads = shape.num_kv_heads;
  args.head_dim = shape.head_dim;
  args.sliding_window = shape.sliding_window;
  args.sink_tokens = shape.sink_tokens;
  args.num_splits = num_splits;
  args.head_chunks = chunks;
  args.scale = shape.scale;

  const int32_t group = shape.num_heads / shape.num_kv_heads;
  const size_t q_copies = shape.sink_tokens > 0 ? 2 : 1;  // q, and q_sink for the sinks
  const size_t dynamic_bytes =
      (static_cast<size_t>(kDecodeTileKeys) * (shape.head_dim + kKeyRowPad) +
       q_copies * static_cast<size_t>(std::min(group, kDecodeMaxHeadsPerBlock)) * shape.head_dim) *
      sizeof(float);
  const dim3 grid(static_cast<unsigned>(num_splits), static_cast<unsigned>(shape.num_kv_heads * chunks),
                  static_cast<unsigned>(step.num_seqs));
  return with_element_type(shape.activation_dtype, [&](auto activation) {
    using T = typename decltype(activation)::type;
    const cudaError_t status = with_kv_type(shape.kv_dtype, [&](auto element) {
      using C = typename decltype(element)::type;
      // q_sink beside q at head_dim 256 passes the 48 KiB a launch gets by
      // default (the static arrays take ~1.5 KiB of it): raise the limit.
      if (dynamic_bytes > kDecodeDefaultDynamicShared)
        if (const cudaError_t raised =
                cudaFuncSetAttribute(reinterpret_cast<const void*>(&attention_decode_kernel<T, C>),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dynamic_bytes));
            raised != cudaSuccess)
          return raised;
      LLMK_LAUNCH(grid, kDecodeThreads, dynamic_bytes, stream, attention_decode_kernel<T, C>)(
          static_cast<const T*>(q), static_cast<const T*>(q_sink),
          kv_reader<C>(cache.k, cache.k_scale, shape.kv_group_size),
          kv_reader<C>(cache.v, cache.v_scale, shape.kv_group_size), static_cast<T*>(out), args);
      return cudaGetLastError();
    });
    if (status != cudaSuccess || num_splits == 1) return status;
    const dim3 merge_grid(static_cast<unsigned>(shape.num_heads), static_cast<unsigned>(step.num_seqs));
    LLMK_LAUNCH(merge_grid, kDecodeThreads, 0, stream, attention_decode_merge_kernel<T>)(static_cast<T*>(out), args);
    return cudaGetLastError();
  });
}

}  // namespace llmk::cuda
