#!/usr/bin/env bash
# llmk against llama.cpp on identical llama-110m weights, four precision pairs
# interleaved in one run (bench/compare_llamacpp.py has the details).
#   scripts/compare-llamacpp.sh --llamacpp LLAMA_CPP_BUILD_DIR [--threads 2] [--rounds N]
#     [--llmk build/bin/llmk] [--pairs f32,bf16,int8,int4] [--json OUT.json] [--work DIR]
#     [--config bench/configs/tinyllama-1.1b.json --seqs 0]   (another Llama shape; no batched measures)
# Needs a built llmk (the llmk target and its CPU plugins) and the project venv
# (numpy, gguf). Prints the table and the CPU; writes the raw figures as JSON.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=$root/.venv/bin/python
[ -x "$python" ] || { echo "compare-llamacpp: no venv at $root/.venv (run scripts/setup.sh)" >&2; exit 1; }
exec "$python" "$root/bench/compare_llamacpp.py" "$@"
