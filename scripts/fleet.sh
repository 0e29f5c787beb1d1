#!/usr/bin/env bash
# A local fleet in one command: N `llmk serve` replicas behind sglang-router
# (or vllm-router), until Ctrl-C or SIGTERM, which stops the router and
# drains every replica (docs/replicas.md).
#   scripts/fleet.sh --model DIR [--replicas 3] [--router sglang|vllm|none]
#                    [--policy cache_aware] [--port 30000] [-- llmk serve args]
# Uses the project venv (scripts/setup.sh installs both routers into it).
set -euo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
[ -x "$python" ] || python=python3
exec "$python" scripts/fleet.py "$@"
