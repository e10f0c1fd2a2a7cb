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
# An editable install leaves graphdbg's own modules uncompiled (a wheel's install compiles them):
# where PYTHONDONTWRITEBYTECODE is set, every process (each CLI command, each isolated replay's
# child) would compile them from source again, about 0.3 s of CPU each.
.venv/bin/python -m compileall -q -j 0 graphdbg tests >/dev/null && .venv/bin/python -m compileall -q -l fixtures >/dev/null || true
.venv/bin/python -c "import graphdbg, torch; print(f'graphdbg {graphdbg.__version__} with torch {torch.__version__} in .venv')"
