#!/usr/bin/env bash
# Runs every gpu-marked test, on the GPU machine (torch, triton, rich, typer, pandas,
# safetensors and pytest already installed there, no network). Wheels come along in .whl/:
# first, on your own machine, `bash scripts/fetch-gpu-wheels.sh` puts Thunder in .whl/thunder
# and pytest-xdist in .whl/test (add --flashinfer for .whl/fi); take .whl along.
# The suite must fit in one device call (10 minutes): with xdist the tests run side by side on
# the one GPU (each needs little memory), which is what keeps it well under that.
set -euo pipefail
cd "$(dirname "$0")/.."
# .whl/opt holds what graphdbg needs that the GPU image may lack (pydantic, platformdirs): each installed only if missing,
# so the image's own versions win where it has them.
wheels=()
for dir in .whl/*/; do
  for whl in "$dir"*.whl; do
    [[ -e $whl ]] || continue
    # .whl/opt: each wheel only where the image can't import it (its file name starts with its module's name)
    name=${whl##*/}
    [[ $dir == .whl/opt/ ]] && python3 -c "import ${name%%-*}" 2>/dev/null && continue
    wheels+=("$whl")
  done
done
if ((${#wheels[@]})); then
  python3 -m pip install -q --no-index --no-deps --no-compile --target .site "${wheels[@]}"
fi
export PYTHONPATH="$PWD/.site:$PWD:$PWD/tests/helpers:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
workers=()
if python3 -c "import xdist" 2>/dev/null; then
  workers=(-n "${GRAPHDBG_GPU_WORKERS:-6}")
fi
python3 -m pytest -m gpu -q -p no:cacheprovider "${workers[@]}" "$@"
