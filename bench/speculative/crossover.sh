#!/usr/bin/env bash
# Where speculation stops paying as the batch grows: llmk bench output tok/s
# at each concurrency with speculation off, prompt lookup and a draft model,
# the three alternated at each size (the machine is shared).
#   bench/speculative/crossover.sh TARGET.gguf DRAFT.gguf "1 2 4 8 16"
# speculative.max_batch_size is the largest size where a method still wins.
set -euo pipefail
target=$1 draft=$2 sizes=${3:-"1 2 4 8 16"}
here=$(cd "$(dirname "$0")" && pwd)
llmk=${LLMK:-build/bin/llmk}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for b in $sizes; do
  for m in none ngram draft; do
    set -- --set speculative.method=$m
    [ "$m" = draft ] && set -- "$@" --set speculative.draft_model="$draft"
    "$llmk" bench --model "$target" --prompts "$here/rewrite.jsonl" -n "$b" --output-len 64 --max-concurrency "$b" \
      --threads 1 --no-progress "$@" >"$out" 2>/dev/null
    tps=$(grep throughput "$out" | sed -E 's/.* ([0-9.]+) output tok\/s.*/\1/')
    tpot=$(awk '$1=="TPOT"{print $2}' "$out")
    echo "batch $b $m output_tok/s=$tps tpot_ms=$tpot"
  done
done
