#!/usr/bin/env bash
# The main job on CPU: install, check the precision of every mode, print the benchmark table
# (in the project venv .venv by default; USE_ACTIVE_ENV=1 for the active environment).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
source scripts/env.sh >/dev/null
"$PY" -m npu_ops_transformer_ext.precision --small
"$PY" -m npu_ops_transformer_ext.bench "$@"
