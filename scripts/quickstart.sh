#!/usr/bin/env bash
# Installs dependencies, builds llmk, and generates a story with the bundled
# tiny model.   scripts/quickstart.sh [--model DIR] [--prompt TEXT]
set -euo pipefail
cd "$(dirname "$0")/.."

model=../shared/models/stories260K
prompt="Once upon a time"
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --prompt) prompt=$2; shift 2 ;;
    *) echo "usage: scripts/quickstart.sh [--model DIR] [--prompt TEXT]" >&2; exit 2 ;;
  esac
done

scripts/setup.sh
# Build progress and any compiler error go to stderr; the story alone to stdout.
LLMK_BUILD_DIR=build scripts/build.sh >&2
echo "--- llmk generate --model $model --prompt \"$prompt\""
build/bin/llmk generate --model "$model" --prompt "$prompt" --max-tokens 200 --temperature 0.8 --top-p 0.95 --seed 7
echo
