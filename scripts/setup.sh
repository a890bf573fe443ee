#!/usr/bin/env bash
# Create .venv with traceinspect and everything its tests need.
#
# torch is only for capturing traces (the analyzer never imports it). Its CPU build comes first, so that no extra
# pulls the multi-GB CUDA build that PyPI serves for a plain `torch==...`:
#   - `torch==2.13.0+cpu` where pip's own sources hold it (a local wheel, a mirror: find-links, an extra index);
#   - else from PyTorch's CPU index (https://download.pytorch.org/whl/cpu), its dependencies from PyPI.
# TRACEINSPECT_TORCH=none leaves torch out: an analysis-only .venv; the tests that capture then skip.
# TRACEINSPECT_TORCH_INDEX=URL names another index that holds the CPU build (a company mirror).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_VERSION=2.13.0
TORCH_INDEX=${TRACEINSPECT_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip() { .venv/bin/python -m pip "$@"; }
pip install -q --upgrade pip >/dev/null 2>&1 || true
extras=test,dask,tensorboard,notebook
if [ "${TRACEINSPECT_TORCH:-cpu}" != none ]; then
  if ! pip install -q "torch==${TORCH_VERSION}+cpu" 2>/dev/null; then
    echo "setup: torch ${TORCH_VERSION}+cpu is not in pip's sources; installing it from ${TORCH_INDEX}" >&2
    pip install -q "torch==${TORCH_VERSION}+cpu" --index-url "$TORCH_INDEX" --extra-index-url https://pypi.org/simple
  fi
  extras=capture,$extras
fi
pip install -q -e ".[${extras}]"
echo "setup: .venv takes $(du -sh .venv 2>/dev/null | cut -f1)" >&2
