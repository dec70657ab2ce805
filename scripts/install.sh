#!/usr/bin/env bash
# Installs what the project needs, builds the wheel through CMake and installs it, into the project
# venv .venv by default (scripts/env.sh; USE_ACTIVE_ENV=1 for the active environment).
# NPU_OPS_OPTIONAL=1 also installs requirements-optional.txt (diffusers, transformers, matplotlib,
# tqdm: the tests against diffusers and transformers run instead of skipping).
# CPU-only unless the CANN toolkit and torch_npu are present (the build says which in one line).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
"$PY" -m pip install -q -r requirements-dev.txt
case "${NPU_OPS_OPTIONAL:-0}" in
  1) "$PY" -m pip install -q -r requirements-optional.txt ;;
  0) ;;
  *) echo "error: NPU_OPS_OPTIONAL must be 0 (default) or 1 (also install requirements-optional.txt), got '${NPU_OPS_OPTIONAL}'" >&2
     exit 1 ;;
esac
# build/lib* holds the package as the last build copied it: a module since deleted or renamed would
# stay in the wheel. The compiled objects (build/temp*) stay, so only what changed is recompiled.
rm -rf dist build/lib* build/bdist*
"$PY" -m build --wheel -n
"$PY" -m pip install -q --force-reinstall --no-deps dist/*.whl
"$PY" -c "import npu_ops_transformer_ext as m; print('installed npu_ops_transformer_ext', m.__version__)"
