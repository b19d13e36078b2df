#!/usr/bin/env bash
# Runs the whole GPU test suite on a machine with a CUDA device, and fails if any test skips:
# a skipped GPU test is one that did not run. Needs the fixtures scripts/make-gpu-fixtures.py
# writes (fixtures/gpu), since the GPU machine need not have ExecuTorch.
#
#   bash scripts/gpu-tests.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
"$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA device visible")'
[ -d "${PTERUN_GPU_FIXTURES:-fixtures/gpu}" ] || { echo "no fixtures: run scripts/make-gpu-fixtures.py first"; exit 1; }
fixtures="${PTERUN_GPU_FIXTURES:-$PWD/fixtures/gpu}"
# Packages the GPU machine's Python lacks (pterun.llm's tokenizers), from wheels the fixture script downloaded.
deps=""
if ls "$fixtures"/wheels/*.whl >/dev/null 2>&1; then
  deps="$(mktemp -d)"
  "$python" -m pip install -q --no-deps --target "$deps" "$fixtures"/wheels/*.whl
fi
# ExecuTorch's own CUDA programs are compiled for the GPU they run on: exported here, once, from ExecuTorch's
# wheels, installed apart (only the export imports them; hydra's pytest plugin among them would break pytest).
if [ ! -d "$fixtures/et_cuda" ] && ls "$fixtures"/export-wheels/*.whl >/dev/null 2>&1; then
  site="$(mktemp -d)"
  "$python" -m pip install -q --no-index --no-deps --target "$site" "$fixtures"/export-wheels/*.whl
  PYTHONPATH="$PWD/src:$PWD:$site${deps:+:$deps}" \
    PTERUN_TOKENIZER="$fixtures/llm/transformers-static-cache/tokenizer.json" \
    "$python" scripts/export-et-cuda.py "$fixtures/et_cuda"
fi
export PYTHONPATH="$PWD/src:$PWD${deps:+:$deps}${PYTHONPATH:+:$PYTHONPATH}"
# The delegate backends' GPU tests load programs the fixture script exported into this cache.
export PTERUN_PROGRAM_CACHE="${PTERUN_GPU_FIXTURES:-$PWD/fixtures/gpu}/cache"
# GPU tests live in tests/gpu and beside each backend's tests (test_*_gpu.py); the rest of the
# suite exports with ExecuTorch, which the GPU machine need not have.
exec "$python" -m pytest -m gpu --no-skips -p no:cacheprovider -q "$@" tests/gpu tests/backends/*/test_*gpu*.py
