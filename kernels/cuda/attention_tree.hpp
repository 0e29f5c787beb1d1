// Token trees (attention API 3.3) in the attention kernels: which of a
// sequence's new tokens a query row sees, and where a row sits in the text.
//
// A tree's new tokens keep their cache positions in row order (new token j
// of a sequence with `cached` positions before the step is stored at cache
// position cached + j), but row j sees, of the new tokens, only its
// ancestors and itself, and its text position (which the sliding window
// counts from) is cached + its depth. `parents` is the sequence's slice of
// the step's tree_parents: parents[j] is j's parent among the new tokens,
// smaller than j, or -1 for the newest cached position. The plugin checks
// that on the host before any kernel reads it, so every walk below ends
// within j steps (at most the step's tokens of one sequence).
//
// With parents null the sequence is causal: every new token before the row
// is its ancestor and depth equals the row.
#pragma once

#include <cstdint>

#include "cuda_compat.hpp"

namespace llmk::cuda::device {

// New token j's ancestors among the new tokens.
__device__ __forceinline__ int tree_depth(const int32_t* parents, int j) {
  if (parents == nullptr) return j;
  int depth = 0;
  for (int x = parents[j]; x >= 0; x = parents[x]) ++depth;
  return depth;
}

// Whether new token j is `row` itself or one of its ancestors (j <= row).
__device__ __forceinline__ bool tree_sees(const int32_t* parents, int row, int j) {
  if (parents == nullptr) return j <= row;
  int x = row;
  while (x > j) x = parents[x];
  return x == j;
}

// Whether the row (new token `row` of a sequence whose new tokens start at
// cache position `cached`) sees the key at cache position `key` <= its own:
// every cached key the caller's range admits, of the new keys its ancestors
// and itself, a new key outside the sinks only where its text position is at
// least `first` (the row's window start; 0 without a window).
__device__ __forceinline__ bool tree_visible(const int32_t* parents, int cached, int row, int key, bool sink,
                                             int first) {
  if (parents == nullptr || key < cached) return true;
  const int j = key - cached;
  if (!tree_sees(parents, row, j)) return false;
  return sink || cached + tree_depth(parents, j) >= first;
}

}  // namespace llmk::cuda::device
