# Shortcuts; the scripts are what README and CI run.
.PHONY: install test main bench bench-cpu lint dev

install:
	bash scripts/install.sh

test:
	bash scripts/test.sh

main:
	bash scripts/main.sh

bench:
	python -m npu_ops_transformer_ext.bench

# The README's CPU figures: three sweep runs, their spread and plot, decode per-call (quiet machine).
bench-cpu:
	bash scripts/bench_cpu.sh

# In-place build for development: PYTHONPATH=python python -m pytest tests
dev:
	python setup.py build_ext --inplace

lint:
	ruff check python tests benchmarks

