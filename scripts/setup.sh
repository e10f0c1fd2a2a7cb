#!/usr/bin/env bash
# Set up graphdbg in ./.venv: the package, its dependencies and the test tools.
# torch: a torch the machine already has is used as it is; where there is none, torch==2.13.0
# is installed (on the CPU machines this project runs on, that is the local CPU build; an
# unpinned torch would pull several GB of CUDA packages).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  if "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m venv --system-site-packages .venv
  else
    "$PY" -m venv .venv
  fi
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q --disable-pip-version-check torch==2.13.0
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[dev]"
.venv/bin/python -c "import graphdbg, torch; print(f'graphdbg {graphdbg.__version__} with torch {torch.__version__} in .venv')"
