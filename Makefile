# Shortcuts; the scripts are what README and CI run. Every target runs in the environment the
# scripts use (scripts/env.sh: the project venv .venv unless USE_ACTIVE_ENV=1 or NPU_OPS_VENV=dir).
IN_ENV = bash -c 'set -e; source scripts/env.sh >/dev/null; "$$PY" "$$@"' _
.PHONY: install test main bench bench-cpu lint dev

install:
	bash scripts/install.sh

test:
	bash scripts/test.sh

main:
	bash scripts/main.sh

bench:
	$(IN_ENV) -m npu_ops_transformer_ext.bench

# The README's CPU figures: three sweep runs, their spread and plot, decode per-call (quiet machine).
bench-cpu:
	bash scripts/bench_cpu.sh

# In-place build for development: PYTHONPATH=python .venv/bin/python -m pytest tests
dev:
	$(IN_ENV) setup.py build_ext --inplace

lint:
	$(IN_ENV) -m ruff check python tests benchmarks

