// A register-tiled form of attend_chunk for prefill: many query rows against
// a chunk of up to kTileKeys keys, computed like two small GEMMs (scores =
// Q K^T with the chunk's keys transposed once into scratch, then acc += P V)
// with broadcast FMAs and no horizontal reductions.
#pragma once

#include <cstdint>

#include "plugins/attention_cpu/attend_chunk.hpp"

namespace llmk::attention_cpu {

constexpr int kTileKeys = 64;

// True when the tiled kernel serves this head_dim (a multiple of 16, at most 128)
// on this build (AVX-512, or AVX2 + FMA: attend_tile_avx2.cpp).
bool tile_supports(int head_dim);

// Same contract as attend_chunk, with num_keys <= kTileKeys.
// k_t: [head_dim, kTileKeys] scratch; alpha: [num_rows] scratch.
void attend_chunk_tiled(const float* const* q_rows, const int64_t* low_key, const int64_t* last_key, int num_rows,
                        const float* const* k_rows, const float* const* v_rows, int64_t first_key, int num_keys,
                        int head_dim, float scale, float* scores, RowsState state, float* k_t, float* alpha);

}  // namespace llmk::attention_cpu
