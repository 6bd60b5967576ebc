# The two set-up commands of the README.  Each does all of its own set-up.
VENV ?= .venv
export OFFLOAD_SHIM_LLVM14_ROOT ?= $(CURDIR)/.cache/llvm14
export OFFLOAD_SHIM_LIBOFFLOAD_ROOT ?= $(CURDIR)/.cache/liboffload22
export OFFLOAD_SHIM_LLVM19_ROOT ?= $(CURDIR)/.cache/llvm19

.PHONY: demo test setup bench mutation clean

setup:
	bash scripts/setup.sh test,cuda,bench

## the main job: every plugin with a device runs register/init/alloc/submit/launch/retrieve/teardown
demo: setup
	$(VENV)/bin/offload-shim info
	$(VENV)/bin/offload-shim demo

## the tests
test: setup
	cd tests && ../$(VENV)/bin/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

bench: setup
	$(VENV)/bin/python -m pip install -q ".[bench]"
	$(VENV)/bin/python benchmarks/run.py
	$(VENV)/bin/python benchmarks/run_overhead.py
	$(VENV)/bin/python benchmarks/lifecycle.py

## mutation testing of the core modules (mutmut; configuration in pyproject.toml [tool.mutmut]);
## MUTANTS='offload_shim.core.runtime*' restricts it; results: docs/testing.md
mutation: setup
	$(VENV)/bin/python -m pip install -q ".[test,mutation]"
	OFFLOAD_SHIM_POOL_PURE=1 $(VENV)/bin/mutmut run $(MUTANTS)   # the pool's Python path too
	$(VENV)/bin/mutmut results

clean:
	rm -rf build dist $(VENV) .cache *.egg-info mutants
