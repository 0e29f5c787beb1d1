// Paged attention, correct before fast (contract in attention_paged.hpp).
#include "cuda_compat.hpp"
#include "attention_paged.hpp"

#include <type_traits>

#include "attention_tree.hpp"
#include "device_common.hpp"
#include "dtype_dispatch.hpp"
#include "kv_access.hpp"

namespace llmk::cuda {
namespace {

constexpr int kDimsPerThread = (kAttentionMaxHeadDim + kAttentionThreads - 1) / kAttentionThreads;

// k, v: [num_tokens, num_kv_heads, head_dim]; slot_mapping: [num_tokens];
// the cache arrays: [num_slots, num_kv_heads, head_dim]. One block per token.
template <class T, class C>
__global__ void __launch_bounds__(kKvWriteThreads, 1) kv_cache_write_kernel(const T* __restrict__ k, const T* __restrict__ v,
                                      const int32_t* __restrict__ slot_mapping, device::KvWrite<C> k_cache,
                                      device::KvWrite<C> v_cache, int64_t row_size) {
  const int64_t token = blockIdx.x;
  const int64_t slot = slot_mapping[token];
  if (slot < 0) return;
  for (int64_t i = threadIdx.x; i < row_size; i += blockDim.x) {
    k_cache.put(slot * row_size + i, device::to_float(k[token * row_size + i]));
    v_cache.put(slot * row_size + i, device::to_float(v[token * row_size + i]));
  }
}

// The I8 cache: one thread per group of the row (groups are short: 8 by
// default), amax, scale and the group's bytes, as kernels/cpu/kv_quant does.
template <class T>
__device__ __forceinline__ void quantize_group(const T* src, device::KvWrite<int8_t> dst, int64_t row, int64_t g) {
  const int64_t first = g * dst.group_size;
  float amax = 0.0f;
  for (int i = 0; i < dst.group_size; ++i) amax = fmaxf(amax, fabsf(device::to_float(src[first + i])));
  const float inv = device::i8_inverse_scale(amax);
  dst.scales[row / dst.group_size + g] = amax / 127.0f;
  for (int i = 0; i < dst.group_size; ++i) dst.data[row + first + i] = device::quantize_i8(device::to_float(src[first + i]), inv);
}

template <class T>
__global__ void __launch_bounds__(kKvWriteThreads, 1) kv_cache_write_i8_kernel(const T* __restrict__ k, const T* __restrict__ v,
                                         const int32_t* __restrict__ slot_mapping, device::KvWrite<int8_t> k_cache,
                                         device::KvWrite<int8_t> v_cache, int64_t row_size) {
  const int64_t token = blockIdx.x;
  const int64_t slot = slot_mapping[token];
  if (slot < 0) return;
  for (int64_t g = threadIdx.x; g < row_size / k_cache.group_size; g += blockDim.x) {
    quantize_group(k + token * row_size, k_cache, slot * row_size, g);
    quantize_group(v + token * row_size, v_cache, slot * row_size, g);
  }
}

// The sequence owning query row `token`: the last s with query_start[s] <= token
// (sequences with no new rows share their start with the next one).
__device__ __forceinline__ int find_sequence(const int32_t* query_start, int num_seqs, int token) {
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (query_start[mid] <= token)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

struct AttentionArgs {
  const int32_t* query_start;   // [num_seqs + 1]
  const int32_t* context_lens;  // [num_seqs]
  const int32_t* block_tables;  // [num_seqs, max_blocks_per_seq]
  const int32_t* tree_parents;  // [num_tokens] or null (attention_tree.hpp)
  int32_t num_seqs, max_blocks_per_seq, block_size;
  int32_t num_heads, num_kv_heads, head_dim, sliding_window;
  float scale;
  int32_t min_query_len;  // sequences with fewer new rows are not served
  int32_t sink_tokens;    // positions below it: seen by every later query, scored with q_sink
};

// q, out: [num_tokens, num_heads, head_dim]; k_cache, v_cache: [num_slots, num_kv_heads, head_dim].
// q_sink: [num_tokens, num_heads, head_dim] or null (q scores the sinks).
// Block (token, head); blockDim.x == kAttentionThreads. acc[] has a constant
// size, so it stays in registers. Two passes over the keys, one softmax: the
// sinks [0, sink_end) with the q_sink row, then [rest_first, position] with q.
template <class T, class C>
__global__ void __launch_bounds__(kAttentionThreads, 1) attention_paged_kernel(const T* __restrict__ q, const T* __restrict__ q_sink,
                                       device::KvRead<C> k_cache, device::KvRead<C> v_cache,
                                       T* __restrict__ out, AttentionArgs args) {
  __shared__ float q_row[kAttentionMaxHeadDim];  // q * scale, f32
  __shared__ float weights[kAttentionThreads];   // this tile's exp(score - running max)
  __shared__ int32_t slots[kAttentionThreads];   // this tile's cache slots
  __shared__ float scratch[device::kMaxWarpsPerBlock + 1];

  const int token = blockIdx.x, head = blockIdx.y, tid = threadIdx.x;
  const int head_dim = args.head_dim;
  const int seq = find_sequence(args.query_start, args.num_seqs, token);
  const int query_len = args.query_start[seq + 1] - args.query_start[seq];
  if (query_len < args.min_query_len) return;  // the whole block: no barrier is left waiting
  // A tree's row: cache position in row order, text position cached + depth.
  const int row = token - args.query_start[seq], cached = args.context_lens[seq] - query_len;
  const int32_t* parents = args.tree_parents == nullptr ? nullptr : args.tree_parents + args.query_start[seq];
  const int position = cached + row;
  const int text = cached + device::tree_depth(parents, row);
  const int first = args.sliding_window > 0 ? max(0, text - args.sliding_window + 1) : 0;
  const int sink_end = min(args.sink_tokens, position + 1);  // the sinks this query sees
  const int rest_first = max(first, args.sink_tokens);
  const int kv_head = head / (args.num_heads / args.num_kv_heads);
  const int32_t* table = args.block_tables + static_cast<int64_t>(seq) * args.max_blocks_per_seq;
  const int64_t kv_stride = static_cast<int64_t>(args.num_kv_heads) * head_dim;  // elements per slot
  const int64_t head_offset = static_cast<int64_t>(kv_head) * head_dim;

  float running_max = -INFINITY, running_sum = 0.0f;
  float acc[kDimsPerThread];
  for (int i = 0; i < kDimsPerThread; ++i) acc[i] = 0.0f;

  const int64_t q_offset = (static_cast<int64_t>(token) * args.num_heads + head) * head_dim;
  for (int pass = sink_end > 0 ? 0 : 1; pass < 2; ++pass) {
    const bool sinks = pass == 0;
    const int key_begin = sinks ? 0 : rest_first, key_end = sinks ? sink_end : position + 1;  // [begin, end)
    if (key_begin >= key_end) break;  // only the second pass can be empty (a query among the sinks)
    const T* q_in = (sinks && q_sink != nullptr ? q_sink : q) + q_offset;
    for (int d = tid; d < head_dim; d += blockDim.x) q_row[d] = device::to_float(q_in[d]) * args.scale;
    __syncthreads();

    for (int tile = key_begin; tile < key_end; tile += kAttentionThreads) {
      // Score one key per thread.
      const int key = tile + tid;
      const bool seen = key < key_end && device::tree_visible(parents, cached, row, key, sinks, first);
      float score = -INFINITY;
      int32_t slot = -1;
      if (seen) {
        slot = table[key / args.block_size] + key % args.block_size;
        const int64_t k_row = static_cast<int64_t>(slot) * kv_stride + head_offset;
        score = 0.0f;
        for (int d = 0; d < head_dim; ++d) score += q_row[d] * k_cache.at(k_row + d);
      }
      slots[tid] = slot;
      const float new_max = fmaxf(running_max, device::block_max(score, scratch));
      const float weight = seen ? __expf(score - new_max) : 0.0f;
      weights[tid] = weight;
      const float tile_sum = device::block_sum(weight, scratch);  // its barriers publish slots and weights
      // 0 on the first tile with a key (running_max = -inf); 1 while a tree
      // row has seen no key yet (new_max = -inf, nothing accumulated).
      const float rescale = new_max == -INFINITY ? 1.0f : __expf(running_max - new_max);
      running_sum = running_sum * rescale + tile_sum;
      running_max = new_max;

      // Weighted V sum, one head_dim element per thread (coalesced rows).
      const int num_keys = min(kAttentionThreads, key_end - tile);
      for (int i = 0; i < kDimsPerThread; ++i) {
        const int d = tid + i * kAttentionThreads;
        if (d >= head_dim) continue;
        float a = acc[i] * rescale;
        for (int j = 0; j < num_keys; ++j)
          if (slots[j] >= 0) a += weights[j] * v_cache.at(static_cast<int64_t>(slots[j]) * kv_stride + head_offset + d);
        acc[i] = a;
      }
      __syncthreads();  // the next tile overwrites slots and weights (the next pass, q_row)
    }
  }

  T* out_row = out + (static_cast<int64_t>(token) * args.num_heads + head) * head_dim;
  const float inv_sum = 1.0f / running_sum;
  for (int i = 0; i < kDimsPerThread; ++i) {
    const int d = tid + i * kAttentionThreads;
    if (d < head_dim) out_row[d] = device::from_float<T>(acc[i] * inv_sum);
  }
}

bool is_element_type(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16;
}

}  // namespace

cudaError_t check_paged_attention_shape(const PagedAttentionShape& shape) {
  const bool ok = shape.num_heads > 0 && shape.num_kv_heads > 0 && shape.num_heads % shape.num_kv_heads == 0 &&
                  shape.head_dim > 0 && shape.head_dim <= kAttentionMaxHeadDim && shape.sliding_window >= 0 &&
                  shape.sink_tokens >= 0 &&
                  is_element_type(shape.activation_dtype) &&
                  (is_element_type(shape.kv_dtype) ||
                   (shape.kv_dtype == DType::i8 && shape.kv_group_size > 0 &&
                    shape.head_dim % shape.kv_group_size == 0));
  return ok ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t kv_cache_write(const PagedAttentionShape& shape, const PagedAttentionStep& step, const void* k,
                           const void* v, const PagedKvCache& cache, cudaStream_t stream) {
  if (const cudaError_t status = check_paged_attention_shape(shape); status != cudaSuccess) return status;
  if (step.num_tokens < 0) return cudaErrorInvalidValue;
  if (step.num_tokens == 0) return cudaSuccess;
  const int64_t row_size = static_cast<int64_t>(shape.num_kv_heads) * shape.head_dim;
  return with_element_type(shape.activation_dtype, [&](auto activation) {
    using T = typename decltype(activation)::type;
    if (shape.kv_dtype == DType::i8) {
      if (cache.k_scale == nullptr || cache.v_scale == nullptr) return cudaErrorInvalidValue;
      const device::KvWrite<int8_t> kw{static_cast<int8_t*>(cache.k), cache.k_scale, shape.kv_group_size};
      const device::KvWrite<int8_t> vw{static_cast<int8_t*>(cache.v), cache.v_scale, shape.kv_group_size};
      LLMK_LAUNCH(static_cast<unsigned>(step.num_tokens), kKvWriteThreads, 0, stream, kv_cache_write_i8_kernel<T>)(
          static_cast<const T*>(k), static_cast<const T*>(v), step.slot_mapping, kw, vw, row_size);
      return cudaGetLastError();
    }
    return with_element_type(shape.kv_dtype, [&](auto element) {
      using C = typename decltype(element)::type;
      LLMK_LAUNCH(static_cast<unsigned>(step.num_tokens), kKvWriteThreads, 0, stream, kv_cache_write_kernel<T, C>)(
          static_cast<const T*>(k), static_cast<const T*>(v), step.slot_mapping,
          device::KvWrite<C>{static_cast<C*>(cache.k)}, device::KvWrite<C>{static_cast<C*>(cache.v)}, row_size);
      return cudaGetLastError();
    });
  });
}

cudaError_t attention_paged(const PagedAttentionShape& shape, const PagedAttentionStep& step, const void* q,
                            const PagedKvCache& cache, void* out, cudaStream_t stream, int32_t min_query_len,
                            const void* q_sink) {
  if (const cudaError_t status = check_paged_attention_shape(shape); status != cudaSuccess) return status;
  if (step.num_tokens < 0 || step.block_size <= 0 || (step.num_tokens > 0 && step.num_seqs <= 0))
    return cudaErrorInvalidValue;
  if (shape.kv_dtype == DType::i8 && (cache.k_scale == nullptr || cache.v_scale == nullptr))
    return cudaErrorInvalidValue;
  if (step.num_tokens == 0) return cudaSuccess;
  const AttentionArgs args{step.query_start,       step.context_lens,      step.block_tables,
                           step.tree_parents,      step.num_seqs,          step.max_blocks_per_seq, step.block_size,
                           shape.num_heads,        shape.num_kv_heads,     shape.head_dim,
                           shape.sliding_window,   shape.scale,            min_query_len,
                           shape.sink_tokens};
  const dim3 grid(static_cast<unsigned>(step.num_tokens), static_cast<unsigned>(shape.num_heads));
  return with_element_type(shape.activation_dtype, [&](auto activation) {
    using T = typename decltype(activation)::type;
    return with_kv_type(shape.kv_dtype, [&](auto element) {
      using C = typename decltype(element)::type;
      LLMK_LAUNCH(grid, kAttentionThreads, 0, stream, attention_paged_kernel<T, C>)(
          static_cast<const T*>(q), static_cast<const T*>(q_sink),
          kv_reader<C>(cache.k, cache.k_scale, shape.kv_group_size),
          kv_reader<C>(cache.v, cache.v_scale, shape.kv_group_size), static_cast<T*>(out), args);
      return cudaGetLastError();
    });
  });
}

cudaError_t attention_paged_run(const PagedAttentionShape& shape, const PagedAttentionStep& step, const void* q,
                                const void* k, const void* v, const PagedKvCache& cache, void* out,
                                cudaStream_t stream, const void* q_sink) {
  if (const cudaError_t status = kv_cache_write(shape, step, k, v, cache, stream); status != cudaSuccess)
    return status;
  return attention_paged(shape, step, q, cache, out, stream, 1, q_sink);
}

}  // namespace llmk::cuda
