# Shortcuts; the scripts are what README and CI run.
.PHONY: install test main bench lint dev

install:
	bash scripts/install.sh

test:
	bash scripts/test.sh

main:
	bash scripts/main.sh

bench:
	python -m npu_ops_transformer_ext.bench

# In-place build for development: PYTHONPATH=python python -m pytest tests
dev:
	python setup.py build_ext --inplace

lint:
	ruff check python tests benchmarks

