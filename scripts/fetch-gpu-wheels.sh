#!/usr/bin/env bash
# On this machine (with network): the wheels the GPU machine lacks (it has Python 3.12 and no
# network), into .whl/ (ignored by git):
#   .whl/thunder  lightning-thunder and the few packages it needs beyond the machine's image (~1.6 MB)
#   .whl/test     pytest-xdist and execnet, so that scripts/gpu-tests.sh runs tests side by side
#   .whl/opt      pydantic and what it needs, platformdirs, and the test suite's own needs
#                 (jsonschema, hypothesis, expecttest, import-linter), each for a GPU image without it
#   .whl/graphdbg graphdbg's own wheel, built from this checkout (scripts/gpu-cpu-suite.sh installs it)
# Pass --flashinfer for .whl/fi (flashinfer and apache-tvm-ffi, 63 MB: the device tool carries 64 MiB in all),
# --sage for .whl/sage (sageattention 1.0.6, its Triton kernels: a 20 kB pure-Python wheel).
set -euo pipefail
cd "$(dirname "$0")/.."
plat=(--only-binary=:all: --python-version 3.12 --implementation cp
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
get() { dir=$1; shift; mkdir -p "$dir"; python3 -m pip download -q --no-deps "${plat[@]}" -d "$dir" "$@"; }
get .whl/thunder lightning-thunder==0.2.6 looseversion==1.3.0 optree dill
for arg in "$@"; do
  case $arg in
    --flashinfer) get .whl/fi flashinfer-python==0.7.2.post1 'apache-tvm-ffi>=0.1.11,<0.2' ;;
    --sage) get .whl/sage sageattention==1.0.6 ;;
  esac
done
get .whl/test pytest-xdist==3.8.0 execnet==2.1.2
# pydantic (graphdbg's manifest schema) and platformdirs (its cache folder), each installed there only if the image lacks it
get .whl/opt pydantic==2.12.4 pydantic-core==2.41.5 annotated-types==0.7.0 typing-inspection==0.4.2 platformdirs==4.5.0
# the CPU suite's needs the image lacks (scripts/gpu-cpu-suite.sh), each installed only where missing
get .whl/opt jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 attrs==26.1.0 \
  hypothesis==6.170.27 sortedcontainers==2.4.0 expecttest==0.3.0 import-linter==2.17 grimp==3.20 pytest-timeout==2.4.0
rm -rf .whl/graphdbg && python3 -m pip wheel -q --no-deps -w .whl/graphdbg .
du -sh .whl/*
