// Causal prefill attention on tensor cores (contract and design in attention_flash.hpp).
#include "cuda_compat.hpp"
#include "attention_flash.hpp"

#include <type_traits>

#include "attention_tree.hpp"
#include "device_common.hpp"
#include "dtype_dispatch.hpp"
#include "kv_access.hpp"

namespace llmk::cuda {
namespace {

namespace wmma = nvcuda::wmma;

// Fragment arrays stay in registers only when every index is a constant:
// the loops over them are unrolled (nvcc; the simulation has no registers).
#if defined(__CUDACC__)
#define LLMK_UNROLL _Pragma("unroll")
#else
#define LLMK_UNROLL
#endif

constexpr int kTile = 16;  // WMMA's m = n = k
constexpr float kLog2e = 1.4426950408889634f;

struct FlashArgs {
  const int32_t* query_start;   // [num_seqs + 1]
  const int32_t* context_lens;  // [num_seqs]
  const int32_t* block_tables;  // [num_seqs, max_blocks_per_seq]
  const int32_t* tree_parents;  // [num_tokens] or null (attention_tree.hpp)
  int32_t num_seqs, max_blocks_per_seq, block_size;
  int32_t num_heads, num_kv_heads, head_dim, sliding_window;
  int32_t sink_tokens;       // positions below it: seen by every later query, scored with q_sink
  int32_t padded_dim;        // head_dim rounded up to kTile
  int32_t group;             // query heads per KV head
  int32_t heads_per_block;   // min(group, kFlashRows)
  int32_t tokens_per_block;  // kFlashRows / heads_per_block
  int32_t head_chunks;       // ceil(group / heads_per_block)
  int32_t min_query_len;
  float q_scale;             // softmax scale * log2(e): scores come out in log2 units
};

// The dynamic shared memory of one block, in bytes from a 32-byte aligned
// base (WMMA pointers must be 256-bit aligned; every offset below is a
// multiple of 32 because padded_dim and num_keys are multiples of 16):
//   union {
//     q_stage  [kFlashRows][padded_dim] operand      (before the key loop)
//     k_tile   [num_keys][padded_dim] operand,  v_tile (same),
//     scores   [kFlashWarps][16][num_keys] f32,  probs [kFlashWarps][16][num_keys] operand
//   }
//   o_scratch [kFlashWarps][16][16] f32   (rescale and output of one accumulator tile)
//   row_max, row_sum, row_alpha [kFlashRows] f32
//   slots [num_keys] int32
struct FlashLayout {
  int64_t k_tile, v_tile, scores, probs, o_scratch, row_max, row_sum, row_alpha, slots, total;
};

__host__ __device__ inline FlashLayout flash_layout(int padded_dim, int num_keys, int operand_size) {
  FlashLayout l{};
  const int64_t tile_bytes = static_cast<int64_t>(num_keys) * padded_dim * operand_size;
  l.k_tile = 0;
  l.v_tile = tile_bytes;
  l.scores = 2 * tile_bytes;
  l.probs = l.scores + static_cast<int64_t>(kFlashWarps) * kTile * num_keys * 4;
  const int64_t loop_bytes = l.probs + static_cast<int64_t>(kFlashWarps) * kTile * num_keys * operand_size;
  const int64_t q_bytes = static_cast<int64_t>(kFlashRows) * padded_dim * operand_size;
  l.o_scratch = loop_bytes > q_bytes ? loop_bytes : q_bytes;
  l.row_max = l.o_scratch + static_cast<int64_t>(kFlashWarps) * kTile * kTile * 4;
  l.row_sum = l.row_max + kFlashRows * 4;
  l.row_alpha = l.row_sum + kFlashRows * 4;
  l.slots = l.row_alpha + kFlashRows * 4;
  l.total = l.slots + static_cast<int64_t>(num_keys) * 4;
  return l;
}

// Slack for aligning the dynamic shared memory base (16-byte aligned) to 32 bytes.
constexpr int kAlignSlack = 32;

// The first key position a query at `position` sees.
__device__ __forceinline__ int first_visible(int position, int sliding_window) {
  return sliding_window > 0 ? max(0, position - sliding_window + 1) : 0;
}

// q, out: [num_tokens, num_heads, head_dim] of T; the caches: [num_slots,
// num_kv_heads, head_dim] read through KvRead<C>; Op: the WMMA operand type.
// q_sink: as q, or null (q scores the sinks).
// kHeadTiles: padded_dim / 16 at most (the fragment arrays' size); kKeys:
// keys per tile. Block (tile, kv head x head chunk), kFlashThreads threads.
template <class T, class C, class Op, int kHeadTiles, int kKeys>
__global__ void __launch_bounds__(kFlashThreads, 1) attention_flash_kernel(const T* __restrict__ q,
                                       const T* __restrict__ q_sink, device::KvRead<C> k_cache,
                                       device::KvRead<C> v_cache, T* __restrict__ out, FlashArgs args) {
  // Which sequence and tile: sequence s owns tiles [s + query_start[s] / tpb, s + 1 + query_start[s+1] / tpb).
  const int tpb = args.tokens_per_block;
  int seq = 0;
  {
    int lo = 0, hi = args.num_seqs - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (mid + args.query_start[mid] / tpb <= static_cast<int>(blockIdx.x))
        lo = mid;
      else
        hi = mid - 1;
    }
    seq = lo;
  }
  const int query_begin = args.query_start[seq];
  const int query_len = args.query_start[seq + 1] - query_begin;
  const int tile = static_cast<int>(blockIdx.x) - (seq + query_begin / tpb);
  if (query_len < args.min_query_len || tile * tpb >= query_len) return;  // the whole block, before any barrier

  const int kv_head = static_cast<int>(blockIdx.y) / args.head_chunks;
  const int chunk = static_cast<int>(blockIdx.y) % args.head_chunks;
  const int hpb = args.heads_per_block;
  const int num_chunk_heads = min(hpb, args.group - chunk * hpb);  // the last chunk may hold fewer
  const int num_tile_tokens = min(tpb, query_len - tile * tpb);
  const int first_token = query_begin + tile * tpb;                         // row index in q / out
  const int cached = args.context_lens[seq] - query_len;                    // the sequence's first new position
  const int first_position = cached + tile * tpb;                           // the tile's first cache position
  // A tree's rows (attention_tree.hpp) see their ancestors among the new
  // keys, and their window starts from their text position (cached + depth),
  // which may lie before their cache position: the block's and warps' first
  // keys are then bounded by the sequence's first new position.
  const int32_t* parents = args.tree_parents == nullptr ? nullptr : args.tree_parents + query_begin;
  const int last_position = first_position + num_tile_tokens - 1;
  const int head_dim = args.head_dim, dp = args.padded_dim, num_head_tiles = dp / kTile;
  const int32_t* table = args.block_tables + static_cast<int64_t>(seq) * args.max_blocks_per_seq;
  const int64_t kv_stride = static_cast<int64_t>(args.num_kv_heads) * head_dim;  // elements per slot
  const int64_t kv_offset = static_cast<int64_t>(kv_head) * head_dim;
  const int first_head = kv_head * args.group + chunk * hpb;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // Row r of the block: token r / hpb of the tile, query head first_head + r % hpb.
  auto row_valid = [&](int r) { return r / hpb < num_tile_tokens && r % hpb < num_chunk_heads; };
  auto row_offset = [&](int r) {  // element offset of row r in q / out
    return (static_cast<int64_t>(first_token + r / hpb) * args.num_heads + first_head + r % hpb) * head_dim;
  };

  LLMK_DYNAMIC_SHARED(unsigned char, smem_raw);
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 31) & ~uintptr_t{31});
  const FlashLayout layout = flash_layout(dp, kKeys, sizeof(Op));
  Op* q_stage = reinterpret_cast<Op*>(smem);
  Op* k_tile = reinterpret_cast<Op*>(smem + layout.k_tile);
  Op* v_tile = reinterpret_cast<Op*>(smem + layout.v_tile);
  float* scores = reinterpret_cast<float*>(smem + layout.scores) + warp * kTile * kKeys;  // this warp's
  Op* probs = reinterpret_cast<Op*>(smem + layout.probs) + warp * kTile * kKeys;          // this warp's
  float* o_scratch = reinterpret_cast<float*>(smem + layout.o_scratch) + warp * kTile * kTile;
  float* row_max = reinterpret_cast<float*>(smem + layout.row_max);
  float* row_sum = reinterpret_cast<float*>(smem + layout.row_sum);
  float* row_alpha = reinterpret_cast<float*>(smem + layout.row_alpha);
  int32_t* slots = reinterpret_cast<int32_t*>(smem + layout.slots);

  if (tid < kFlashRows) {
    row_max[tid] = -INFINITY;
    row_sum[tid] = 0.0f;
  }

  // This warp's rows: 16 from warp * 16; the positions they span and the keys they see.
  const int warp_row = warp * kTile;
  bool warp_active = false;
  for (int r = warp_row; r < warp_row + kTile; ++r) warp_active = warp_active || row_valid(r);
  const int warp_first_key =
      first_visible(parents == nullptr ? first_position + warp_row / hpb : cached, args.sliding_window);
  const int warp_last_key = first_position + min((warp_row + kTile - 1) / hpb, num_tile_tokens - 1);

  wmma::fragment<wmma::matrix_a, kTile, kTile, kTile, Op, wmma::row_major> q_frag[kHeadTiles];
  wmma::fragment<wmma::accumulator, kTile, kTile, kTile, float> o_frag[kHeadTiles];
  LLMK_UNROLL
  for (int d = 0; d < kHeadTiles; ++d) {
    if (d >= num_head_tiles) break;
    wmma::fill_fragment(o_frag[d], 0.0f);
  }

  // This lane's row in the softmax: two lanes per row, each taking every other key.
  const int my_row = warp_row + lane / 2, half = lane % 2;
  const bool my_row_valid = row_valid(my_row);
  const int my_position = first_position + my_row / hpb;
  const int my_new_row = tile * tpb + my_row / hpb;  // among the sequence's new tokens
  const int my_text = parents == nullptr || !my_row_valid ? my_position : cached + device::tree_depth(parents, my_new_row);
  const int my_first_key = first_visible(my_text, args.sliding_window);

  const int block_first_key = first_visible(parents == nullptr ? first_position : cached, args.sliding_window);
  const int sink_end = min(args.sink_tokens, last_position + 1);  // the sinks the block's rows see
  // Pass 0: the sinks with the q_sink rows; pass 1: the keys from the sinks'
  // end (or the window's start) on with the q rows. One softmax state.
  const int first_pass = sink_end > 0 ? 0 : 1;
  for (int pass = first_pass; pass < 2; ++pass) {
    const bool sinks = pass == 0;
    const int key_begin = sinks ? 0 : max(block_first_key, args.sink_tokens);
    const int key_end = sinks ? sink_end : last_position + 1;  // keys [key_begin, key_end)
    if (key_begin >= key_end) break;  // only pass 1 can be empty: every row among the sinks
    // This lane's row and this warp's rows see keys [first, last] of the pass.
    const int row_first = sinks ? 0 : max(my_first_key, args.sink_tokens);
    const int row_last = sinks ? min(args.sink_tokens - 1, my_position) : my_position;
    const int warp_first = sinks ? 0 : max(warp_first_key, args.sink_tokens);
    const T* q_in = sinks && q_sink != nullptr ? q_sink : q;
    // Pass 1 after pass 0: every warp is done with the tiles q_stage overlays.
    if (pass != first_pass) __syncthreads();

    // Scaled q rows into the operand type; padding rows and columns are zero.
    for (int i = tid; i < kFlashRows * dp; i += kFlashThreads) {
      const int r = i / dp, d = i % dp;
      float x = 0.0f;
      if (d < head_dim && row_valid(r)) x = device::to_float(q_in[row_offset(r) + d]) * args.q_scale;
      q_stage[i] = device::from_float<Op>(x);
    }
    __syncthreads();
    LLMK_UNROLL
    for (int d = 0; d < kHeadTiles; ++d) {
      if (d >= num_head_tiles) break;
      wmma::load_matrix_sync(q_frag[d], q_stage + warp_row * dp + d * kTile, dp);
    }

    for (int key0 = key_begin; key0 < key_end; key0 += kKeys) {
      // 1. The tile's slots, then K and V. The barrier after the slots also
      //    orders the previous tile's (or q_stage's) readers before the
      //    writes of k_tile and v_tile, and this warp's reads of its scores
      //    and probs before the next tile writes them.
      if (tid < kKeys) {
        const int key = key0 + tid;
        slots[tid] = key < key_end ? table[key / args.block_size] + key % args.block_size : -1;
      }
      __syncthreads();
      for (int i = tid; i < kKeys * dp; i += kFlashThreads) {
        const int j = i / dp, d = i % dp;
        const int32_t slot = slots[j];
        float kx = 0.0f, vx = 0.0f;
        if (slot >= 0 && d < head_dim) {
          const int64_t e = static_cast<int64_t>(slot) * kv_stride + kv_offset + d;
          kx = k_cache.at(e);
          vx = v_cache.at(e);
        }
        k_tile[i] = device::from_float<Op>(kx);
        v_tile[i] = device::from_float<Op>(vx);
      }
      __syncthreads();

      // 2. This warp's rows against the tile, when it holds a key they see.
      if (!warp_active || key0 > warp_last_key || key0 + kKeys - 1 < warp_first) continue;

      // S = Q K^T: k_tile as a col-major [padded_dim, num_keys] B operand.
      LLMK_UNROLL
      for (int n = 0; n < kKeys / kTile; ++n) {
        wmma::fragment<wmma::accumulator, kTile, kTile, kTile, float> s_frag;
        wmma::fill_fragment(s_frag, 0.0f);
        LLMK_UNROLL
        for (int d = 0; d < kHeadTiles; ++d) {
          if (d >= num_head_tiles) break;
          wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, Op, wmma::col_major> k_frag;
          wmma::load_matrix_sync(k_frag, k_tile + n * kTile * dp + d * kTile, dp);
          wmma::mma_sync(s_frag, q_frag[d], k_frag, s_frag);
        }
        wmma::store_matrix_sync(scores + n * kTile, s_frag, kKeys, wmma::mem_row_major);
      }
      __syncwarp();

      // Online softmax of this lane's half row.
      const float* s_row = scores + (lane / 2) * kKeys;
      Op* p_row = probs + (lane / 2) * kKeys;
      const float old_max = row_max[my_row];
      float tile_max = -INFINITY;
      for (int c = half; c < kKeys; c += 2) {
        const int key = key0 + c;
        if (my_row_valid && key >= row_first && key <= row_last &&
            device::tree_visible(parents, cached, my_new_row, key, sinks, my_first_key))
          tile_max = fmaxf(tile_max, s_row[c]);
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(device::kFullWarpMask, tile_max, 1));
      const float new_max = fmaxf(old_max, tile_max);
      // exp2(-inf) = 0 rescales a row that had no key yet (its O is zero);
      // a row that still has none keeps alpha 1.
      const float alpha = new_max == -INFINITY ? 1.0f : exp2f(old_max - new_max);
      float tile_sum = 0.0f;
      for (int c = half; c < kKeys; c += 2) {
        const int key = key0 + c;
        float p = 0.0f;
        if (my_row_valid && key >= row_first && key <= row_last &&
            device::tree_visible(parents, cached, my_new_row, key, sinks, my_first_key))
          p = exp2f(s_row[c] - new_max);
        const Op rounded = device::from_float<Op>(p);
        p_row[c] = rounded;
        tile_sum += device::to_float(rounded);  // the sum of exactly the weights P V multiplies
      }
      tile_sum += __shfl_xor_sync(device::kFullWarpMask, tile_sum, 1);
      // Both lanes of the row read row_max above; a shuffle orders no memory,
      // so the write below waits for a __syncwarp.
      __syncwarp();
      if (half == 0) {
        row_max[my_row] = new_max;
        row_sum[my_row] = row_sum[my_row] * alpha + tile_sum;
        row_alpha[my_row] = alpha;
      }
      // Rescale O only when some row that already had keys saw its max move.
      const bool rescale = __any_sync(device::kFullWarpMask, old_max != -INFINITY && alpha != 1.0f);
      __syncwarp();
      if (rescale) {
        LLMK_UNROLL
        for (int d = 0; d < kHeadTiles; ++d) {
          if (d >= num_head_tiles) break;
          wmma::store_matrix_sync(o_scratch, o_frag[d], kTile, wmma::mem_row_major);
          __syncwarp();
          for (int e = lane; e < kTile * kTile; e += 32) o_scratch[e] *= row_alpha[warp_row + e / kTile];
          __syncwarp();
          wmma::load_matrix_sync(o_frag[d], o_scratch, kTile, wmma::mem_row_major);
          __syncwarp();
        }
      }

      // O += P V: probs as a row-major [16, num_keys] A operand, v_tile as a
      // row-major [num_keys, padded_dim] B operand.
      LLMK_UNROLL
      for (int n = 0; n < kKeys / kTile; ++n) {
        wmma::fragment<wmma::matrix_a, kTile, kTile, kTile, Op, wmma::row_major> p_frag;
        wmma::load_matrix_sync(p_frag, probs + n * kTile, kKeys);
        LLMK_UNROLL
        for (int d = 0; d < kHeadTiles; ++d) {
          if (d >= num_head_tiles) break;
          wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, Op, wmma::row_major> v_frag;
          wmma::load_matrix_sync(v_frag, v_tile + n * kTile * dp + d * kTile, dp);
          wmma::mma_sync(o_frag[d], p_frag, v_frag, o_frag[d]);
        }
      }
    }
  }

  // O / sum to the output, one accumulator tile at a time through o_scratch.
  if (!warp_active) return;
  LLMK_UNROLL
  for (int d = 0; d < kHeadTiles; ++d) {
    if (d >= num_head_tiles) break;
    wmma::store_matrix_sync(o_scratch, o_frag[d], kTile, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < kTile * kTile; e += 32) {
      const int r = warp_row + e / kTile, col = d * kTile + e % kTile;
      if (col < head_dim && row_valid(r)) out[row_offset(r) + col] = device::from_float<T>(o_scratch[e] / row_sum[r]);
    }
    __syncwarp();
  }
}

// Calls f(activation tag, cache tag, operand tag) for the step's dtypes.
template <class F>
cudaError_t with_flash_types(DType activation, DType kv, F&& f) {
  auto with_cache = [&](auto act) -> cudaError_t {
    switch (kv) {
      case DType::f32:
        return f(act, type_tag<float>{}, type_tag<__nv_bfloat16>{});
      case DType::f16:
        return f(act, type_tag<__half>{}, type_tag<__half>{});
      case DType::bf16:
        return f(act, type_tag<__nv_bfloat16>{}, type_tag<__nv_bfloat16>{});
      case DType::i8:
        return f(act, type_tag<int8_t>{}, type_tag<__nv_bfloat16>{});
      default:
        return cudaErrorInvalidValue;
    }
  };
  switch (activation) {
    case DType::f32:
      return with_cache(type_tag<float>{});
    case DType::f16:
      return with_cache(type_tag<__half>{});
    case DType::bf16:
      return with_cache(type_tag<__nv_bfloat16>{});
    default:
      return cudaErrorInvalidValue;
  }
}


template <class T, class C, class Op, int kHeadTiles, int kKeys>
cudaError_t launch_flash(dim3 grid, const void* q, const void* q_sink, const PagedKvCache& cache, void* out,
                         const FlashArgs& args, int32_t group_size, cudaStream_t stream) {
  const int64_t smem = flash_layout(args.padded_dim, kKeys, sizeof(Op)).total + kAlignSlack;
  LLMK_LAUNCH(grid, kFlashThreads, static_cast<std::size_t>(smem), stream,
              attention_flash_kernel<T, C, Op, kHeadTiles, kKeys>)(
      static_cast<const T*>(q), static_cast<const T*>(q_sink), kv_reader<C>(cache.k, cache.k_scale, group_size),
      kv_reader<C>(cache.v, cache.v_scale, group_size), static_cast<T*>(out), args);
  return cudaGetLastError();
}

}  // namespace

cudaError_t check_flash_attention_shape(const PagedAttentionShape& shape) {
  if (const cudaError_t status = check_paged_attention_shape(shape); status != cudaSuccess) return status;
  return shape.head_dim <= kFlashMaxHeadDim ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t attention_flash(const PagedAttentionShape& shape, const PagedAttentionStep& step, const void* q,
                            const PagedKvCache& cache, void* out, cudaStream_t stream, int32_t min_query_len,
                            const void* q_sink) {
  if (const cudaError_t status = check_flash_attention_shape(shape); status != cudaSuccess) return status;
  if (step.num_tokens < 0 || step.block_size <= 0 || (step.num_tokens > 0 && step.num_seqs <= 0) ||
      min_query_len < 1)
    return cudaErrorInvalidValue;
  if (shape.kv_dtype == DType::i8 && (cache.k_scale == nullptr || cache.v_scale == nullptr))
    return cudaErrorInvalidValue;
  if (step.num_tokens == 0) return cudaSuccess;

  FlashArgs args{};
  args.query_start = step.query_start;
  args.context_lens = step.context_lens;
  args.block_tables = step.block_tables;
  args.tree_parents = step.tree_parents;
  args.num_seqs = step.num_seqs;
  args.max_blocks_per_seq = step.max_blocks_per_seq;
  args.block_size = step.block_size;
  args.num_heads = shape.num_heads;
  args.num_kv_heads = shape.num_kv_heads;
  args.head_dim = shape.head_dim;
  args.sliding_window = shape.sliding_window;
  args.sink_tokens = shape.sink_tokens;
  args.padded_dim = (shape.head_dim + kTile - 1) / kTile * kTile;
  args.group = shape.num_heads / shape.num_kv_heads;
  args.heads_per_block = args.group < kFlashRows ? args.group : kFlashRows;
  args.tokens_per_block = kFlashRows / args.heads_per_block;
  args.head_chunks = (args.group + args.heads_per_block - 1) / args.heads_per_block;
  args.min_query_len = min_query_len;
  args.q_scale = shape.scale * kLog2e;

  const dim3 grid(static_cast<unsigned>(step.num_seqs + step.num_tokens / args.tokens_per_block),
                  static_cast<unsigned>(shape.num_kv_heads * args.head_chunks));
  return with_flash_types(shape.activation_dtype, shape.kv_dtype, [&](auto act, auto kv, auto op) {
    using T = typename decltype(act)::type;
    using C = typename decltype(kv)::type;
    using Op = typename decltype(op)::type;
    // Keys per tile shrink as head_dim grows, keeping shared memory under 48 KiB.
    const int32_t group_size = shape.kv_group_size;
    if (args.padded_dim <= 64) return launch_flash<T, C, Op, 4, 64>(grid, q, q_sink, cache, out, args, group_size, stream);
    if (args.padded_dim <= 128) return launch_flash<T, C, Op, 8, 32>(grid, q, q_sink, cache, out, args, group_size, stream);
    return launch_flash<T, C, Op, 16, 16>(grid, q, q_sink, cache, out, args, group_size, stream);
  });
}

}  // namespace llmk::cuda
