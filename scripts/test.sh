#!/usr/bin/env bash
# Install, then run the whole test suite against the installed wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
# Run from tests/ so that `import npu_ops_transformer_ext` finds the installed wheel, never the
# source tree.
cd tests
python -m pytest -q -p no:cacheprovider "$@"
