#!/usr/bin/env bash
# Runs every gpu-marked test, on the GPU machine (torch, triton, rich, typer, pandas,
# safetensors and pytest already installed there, no network). Thunder comes as wheels:
# first, on your own machine, `bash ../shared/device/fetch-wheels.sh` puts them in .whl/thunder
# (add --flashinfer for .whl/fi); take .whl along to the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
if compgen -G ".whl/*/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target .site .whl/*/*.whl
fi
export PYTHONPATH="$PWD/.site:$PWD:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
python3 -m pytest -m gpu -q -p no:cacheprovider "$@"
