# Sourced by the other scripts: picks the Python they install into and run with, as $PY.
#
# Default: the project's own virtual environment .venv (created on first use with python3, or
# $PYTHON), so that installing the pinned torch never replaces the torch of the environment you
# happen to have active. NPU_OPS_VENV=<dir> uses another venv directory.
# USE_ACTIVE_ENV=1: install into and run with the active environment's python instead; the script
# says what it will install there before it does.

case "${USE_ACTIVE_ENV:-0}" in
  1)
    PY="$(command -v python || command -v python3)"
    current_torch="$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"
    echo "USE_ACTIVE_ENV=1: installing into the active environment ($("$PY" -c 'import sys; print(sys.prefix)')):"
    echo "  requirements-dev.txt (torch $(grep -E '^torch==' requirements-dev.txt | cut -d= -f3); installed now: $current_torch),"
    echo "  build tools, test tools, and the npu_ops_transformer_ext wheel (replacing any installed one)"
    ;;
  0)
    VENV="${NPU_OPS_VENV:-.venv}"
    if [ ! -x "$VENV/bin/python" ]; then
      echo "creating the project environment $VENV (USE_ACTIVE_ENV=1 installs into the active environment instead)"
      if ! "${PYTHON:-python3}" -m venv "$VENV"; then
        echo "error: '${PYTHON:-python3} -m venv $VENV' failed (on Debian/Ubuntu: apt-get install python3-venv)." >&2
        echo "       Or run with USE_ACTIVE_ENV=1 to install into the active environment." >&2
        exit 1
      fi
    fi
    PY="$VENV/bin/python"
    echo "using $PY ($("$PY" --version 2>&1))"
    ;;
  *)
    echo "error: USE_ACTIVE_ENV must be 0 (default: the project venv ${NPU_OPS_VENV:-.venv}) or 1 (the active environment), got '${USE_ACTIVE_ENV}'" >&2
    exit 1
    ;;
esac
export PY
