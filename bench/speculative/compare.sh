#!/usr/bin/env bash
# Batch-1 decode on SmolLM2-135M-Instruct: llmk without speculation, with
# prompt lookup and with a draft model, against llama.cpp's plain decode,
# llama-lookup and llama-speculative on the same files and prompts, one
# thread each, the runs alternated round by round (the machine is shared).
#   bench/speculative/compare.sh ROUNDS TARGET.gguf DRAFT.gguf LLAMA_BIN_DIR
# Prints one line per run: round, prompt, engine, output tok/s, acceptance.
set -euo pipefail
rounds=$1 target=$2 draft=$3 llama=$4
here=$(cd "$(dirname "$0")" && pwd)
llmk=${LLMK:-build/bin/llmk}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for p in rewrite open; do
  python3 -c "import json,sys; sys.stdout.write(json.loads(open('$here/$p.jsonl').readline())['prompt'])" >"$tmp/$p.txt"
done
llmk_run() {  # prompt, label, extra settings...
  local p=$1 label=$2; shift 2
  "$llmk" bench --model "$target" --prompts "$here/$p.jsonl" -n 2 --output-len 160 --max-concurrency 1 \
    --threads 1 --no-progress "$@" >"$tmp/out" 2>/dev/null
  local tps tpot acc
  tps=$(grep throughput "$tmp/out" | sed -E 's/.* ([0-9.]+) output tok\/s.*/\1/')
  tpot=$(awk '$1=="TPOT"{print $2}' "$tmp/out")
  acc=$(grep -o '([0-9.]*%)' "$tmp/out" | tr -d '()' || true)
  echo "$r $p $label output_tok/s=$tps tpot_ms=$tpot accepted=${acc:--}"
}
llama_run() {  # prompt, label, binary, args...
  local p=$1 label=$2 bin=$3; shift 3
  "$llama/$bin" -m "$target" -f "$tmp/$p.txt" -n 160 -t 1 -c 1024 --temp 0 --ignore-eos "$@" </dev/null >"$tmp/out" 2>&1 || true
  local tps acc
  if [ "$bin" = llama-cli ]; then
    tps=$(grep -E 'llama_perf_context_print: +eval time' "$tmp/out" | sed -E 's/.* ([0-9.]+) tokens per second.*/\1/')
  else
    tps=$(grep -E '^decoded' "$tmp/out" | sed -E 's/.*speed: +([0-9.]+) t\/s.*/\1/')
  fi
  acc=$(grep -E '^accept' "$tmp/out" | sed -E 's/.*= *//' || true)
  echo "$r $p $label decode_tok/s=$tps accepted=${acc:--}"
}
for r in $(seq 1 "$rounds"); do
  for p in rewrite open; do
    llmk_run "$p" llmk-plain
    llama_run "$p" llama-plain llama-cli -no-cnv
    llmk_run "$p" llmk-ngram --set speculative.method=ngram
    llama_run "$p" llama-lookup llama-lookup --draft 4
    llmk_run "$p" llmk-draft --set speculative.method=draft --set speculative.draft_model="$draft"
    llama_run "$p" llama-speculative llama-speculative -md "$draft" -td 1 --draft 4
  done
done
