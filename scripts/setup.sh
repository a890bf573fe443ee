#!/usr/bin/env bash
# Create .venv with traceinspect and everything its tests need. torch comes first, pinned to the CPU build
# (2.13.0 is available locally), so no extra pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e '.[capture,test,dask,tensorboard,notebook]'
