// Prompt lookup (n-gram drafting), the algorithm alone: the standard library
// and nothing of the engine, so that the plugin proposer.ngram
// (plugins/proposer_ngram) compiles it without linking llmk_core, and
// NgramProposer (core/speculation.hpp) runs the same code in process.
//
// The last n tokens, for n from max_n down to min_n, are looked for earlier
// in the sequence (prompt and output alike); at the latest earlier
// occurrence found, the tokens that followed it are the drafts, as many as
// there are up to max_depth.
//
// As a tree: the continuations after the `width` latest earlier occurrences
// (the longest suffix's first, latest first, then shorter suffixes'), each
// up to max_depth long, merged by common prefix, the first one whole first,
// until max_nodes nodes. A continuation that adds no node (it repeats an
// earlier one) does not count.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace llmk::prompt_lookup {

struct Params {
  int32_t min_n = 2;
  int32_t max_n = 4;
  int32_t width = 1;  // continuations merged into a tree
};

// One sequence's drafts, appended to out.
void chain(const Params& params, std::span<const int32_t> tokens, int32_t max_depth, std::vector<int32_t>& out);

// One sequence's tree in tree order (node j: tokens[j], a child of node
// parents[j] < j, or of the newest token where -1); both cleared first.
void tree(const Params& params, std::span<const int32_t> tokens, int32_t max_depth, int32_t max_nodes,
          std::vector<int32_t>& tokens_out, std::vector<int32_t>& parents_out);

}  // namespace llmk::prompt_lookup
