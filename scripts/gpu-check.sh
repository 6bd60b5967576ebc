#!/usr/bin/env bash
# The GPU checks, as one prepared command for a machine with an NVIDIA GPU and driver:
# sets up like `make test`, then runs only the tests marked `gpu` and the GPU rows of
# the benchmark, and writes what they printed to docs/gpu-run.txt.
set -u
cd "$(dirname "$0")/.."
bash scripts/setup.sh test,cuda,bench >/dev/null || exit 1
{
  echo "# GPU run, $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi -L 2>&1 || true
  cd tests && ../.venv/bin/python -m pytest -q -p no:cacheprovider -m gpu -rs 2>&1
  cd .. && ./.venv/bin/offload-shim bench 2>&1 || true
} | tee docs/gpu-run.txt
