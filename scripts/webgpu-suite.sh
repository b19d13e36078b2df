#!/usr/bin/env bash
# Runs all of ExecuTorch's WebGPU backend tests (the wheel's executorch/backends/webgpu/test: every
# op_tests case and every ops/ test) with each program they lower run on pterun's WebGPU backend, then
# prints the counts and every failure's reason (tests/peer/webgpu/report.py). The test suite runs a fixed
# fast subset of the same tests; this is all of them (25 minutes to an hour on two cores with lavapipe).
#
#   bash scripts/webgpu-suite.sh [pytest arguments]      (PYTHON=.venv/bin/python by default)
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
report=${PTERUN_WEBGPU_REPORT:-webgpu-suite.xml}
PTERUN_WEBGPU_SUITE=all "$python" -m pytest tests/peer/test_executorch_webgpu.py -p no:cacheprovider -q \
  -n "${JOBS:-2}" --junitxml="$report" -o junit_logging=no "$@"
status=$?
"$python" -m tests.peer.webgpu.report "$report"
exit $status
