#!/usr/bin/env bash
# The main job on CPU: install, check the precision of every mode, print the benchmark table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
python -m npu_ops_transformer_ext.precision --small
python -m npu_ops_transformer_ext.bench "$@"
