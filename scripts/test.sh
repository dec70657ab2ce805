#!/usr/bin/env bash
# Install, then run the whole test suite against the installed wheel (in the project venv .venv by
# default; USE_ACTIVE_ENV=1 for the active environment).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
source scripts/env.sh >/dev/null
PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"  # absolute: the tests run from tests/
# Run from tests/ so that `import npu_ops_transformer_ext` finds the installed wheel, never the
# source tree.
cd tests
"$PY" -m pytest -q -p no:cacheprovider "$@"
