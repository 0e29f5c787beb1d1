#include "core/prompt_lookup.hpp"

#include <algorithm>

namespace llmk::prompt_lookup {

void chain(const Params& params, std::span<const int32_t> tokens, int32_t max_depth, std::vector<int32_t>& out) {
  const auto len = static_cast<int64_t>(tokens.size());
  if (max_depth <= 0) return;
  for (int64_t n = std::min<int64_t>(params.max_n, len - 1); n >= params.min_n; --n) {
    const int32_t* suffix = tokens.data() + (len - n);
    // Latest earlier occurrence first: [start, start + n) with start + n < len.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(suffix, suffix + n, tokens.data() + start)) continue;
      const int64_t from = start + n, to = std::min<int64_t>(len, from + max_depth);
      out.insert(out.end(), tokens.begin() + from, tokens.begin() + to);
      return;
    }
  }
}

void tree(const Params& params, std::span<const int32_t> tokens, int32_t max_depth, int32_t max_nodes,
          std::vector<int32_t>& tokens_out, std::vector<int32_t>& parents_out) {
  tokens_out.clear();
  parents_out.clear();
  const auto len = static_cast<int64_t>(tokens.size());
  if (max_depth <= 0 || max_nodes <= 0) return;
  const auto size = [&] { return static_cast<int32_t>(tokens_out.size()); };
  int32_t num_candidates = 0;
  for (int64_t n = std::min<int64_t>(params.max_n, len - 1); n >= params.min_n && num_candidates < params.width;
       --n) {
    const int32_t* suffix = tokens.data() + (len - n);
    for (int64_t start = len - n - 1; start >= 0 && num_candidates < params.width; --start) {
      if (!std::equal(suffix, suffix + n, tokens.data() + start)) continue;
      // Merge the continuation in: follow the nodes it shares, then add the rest.
      const int64_t from = start + n, to = std::min<int64_t>(len, from + max_depth);
      int32_t at = -1;
      bool added = false;
      for (int64_t p = from; p < to; ++p) {
        int32_t child = -1;
        for (int32_t j = at + 1; j < size() && child < 0; ++j)
          if (parents_out[static_cast<size_t>(j)] == at && tokens_out[static_cast<size_t>(j)] == tokens[p])
            child = j;
        if (child < 0) {
          if (size() == max_nodes) break;
          tokens_out.push_back(tokens[p]);
          parents_out.push_back(at);
          child = size() - 1;
          added = true;
        }
        at = child;
      }
      if (added) ++num_candidates;
      if (size() == max_nodes) return;
    }
  }
}

}  // namespace llmk::prompt_lookup
