#!/usr/bin/env bash
# On this machine (with network): the wheels the GPU machine lacks, into .whl/ (ignored by git).
#   .whl/thunder  lightning-thunder and what it needs (../shared/device/fetch-wheels.sh)
#   .whl/test     pytest-xdist and execnet, so that scripts/gpu-tests.sh runs tests side by side
#   .whl/opt      pydantic and what it needs, for a GPU image without it
# Pass --flashinfer for .whl/fi (63 MB; the device tool carries 64 MiB in all).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .git/info .whl/test 2>/dev/null || true
bash ../shared/device/fetch-wheels.sh "$@"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 -d .whl/test pytest-xdist==3.8.0 execnet==2.1.2
# pydantic (graphdbg's manifest schema), installed there only if the image lacks it
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d .whl/opt \
  pydantic==2.12.4 pydantic-core==2.41.5 annotated-types==0.7.0 typing-inspection==0.4.2
du -sh .whl/*
