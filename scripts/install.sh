#!/usr/bin/env bash
# Installs what the project needs, builds the wheel through CMake and installs it.
# CPU-only unless the CANN toolkit and torch_npu are present (the build says which in one line).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -r requirements-dev.txt
rm -rf dist
python -m build --wheel -n
python -m pip install -q --force-reinstall --no-deps dist/*.whl
python -c "import npu_ops_transformer_ext as m; print('installed npu_ops_transformer_ext', m.__version__)"
