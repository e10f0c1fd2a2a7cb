#!/usr/bin/env bash
# The whole CPU suite on the GPU machine's image (torch 2.11, Python 3.12, no network, no
# pydantic, jsonschema or expecttest), CUDA hidden, graphdbg installed as a user installs it:
# pip into a virtual environment that sees the image's own packages (torch, triton, rich, ...),
# with what the image lacks from .whl/ (`bash scripts/fetch-gpu-wheels.sh` on your own machine
# first; it also builds graphdbg's wheel, .whl/graphdbg). 15 xdist workers on the 16 cores: it
# fits one 10-minute device call alone (docs/gpu-tests.md). Arguments go to pytest.
#   bash scripts/gpu-cpu-suite.sh                          # the whole CPU suite
#   bash scripts/gpu-cpu-suite.sh tests/test_training*.py  # some files of it
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
wheel=$(ls -t .whl/graphdbg/graphdbg-*.whl 2>/dev/null | head -1 || true)
if [[ -z $wheel ]]; then
  echo "gpu-cpu-suite: no .whl/graphdbg/graphdbg-*.whl: run bash scripts/fetch-gpu-wheels.sh first" >&2
  exit 2
fi
# the wheel must hold this checkout's graphdbg (compared by content: a copy's file times say nothing)
stale=$(python3 - "$wheel" <<'PY'
import pathlib, sys, zipfile
names = {n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.startswith("graphdbg/") and n.endswith(".py")}
wheel = zipfile.ZipFile(sys.argv[1])
here = {str(p) for p in pathlib.Path("graphdbg").rglob("*.py")}
print(next((n for n in sorted(names | here) if n not in names or n not in here or wheel.read(n) != pathlib.Path(n).read_bytes()), ""))
PY
)
if [[ -n $stale ]]; then
  echo "gpu-cpu-suite: $wheel is not this checkout's graphdbg ($stale differs): run bash scripts/fetch-gpu-wheels.sh again" >&2
  exit 2
fi
# a fresh environment each run: the image's packages seen through it, graphdbg and the rest installed into it
rm -rf .gpu/venv
python3 -m venv --system-site-packages --without-pip .gpu/venv
py=$PWD/.gpu/venv/bin/python
# the image's python3 may itself be a virtual environment (torch in /opt/torch/.venv): --system-site-packages
# sees only the interpreter underneath it, so the image's own packages are added with a .pth file
image_site=$(python3 -c 'import site; print("\n".join(site.getsitepackages()))')
"$py" -c 'import sys, sysconfig; open(sysconfig.get_paths()["purelib"] + "/_gpu_image.pth", "w").write(sys.argv[1] + "\n")' "$image_site"
wheels=("$wheel")
for dir in .whl/opt/ .whl/test/; do
  for whl in "$dir"*.whl; do
    [[ -e $whl ]] || continue
    # .whl/opt: each wheel only where the image can't import it (its file name starts with its module's name)
    name=${whl##*/}
    [[ $dir == .whl/opt/ ]] && "$py" -c "import ${name%%-*}" 2>/dev/null && continue
    wheels+=("$whl")
  done
done
# the image's pip, run by the environment's interpreter, installs into the environment
"$py" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check "${wheels[@]}"
"$py" -c "import graphdbg, torch, sys; print(f'gpu-cpu-suite: graphdbg {graphdbg.__version__} from {graphdbg.__file__}, torch {torch.__version__}, Python {sys.version.split()[0]}')"
echo "gpu-cpu-suite: set up in $((SECONDS - started)) s"
export CUDA_VISIBLE_DEVICES= PYTHONUNBUFFERED=1
unset PYTHONPATH GRAPHDBG_DUMP_DIR
"$py" -m pytest -q -p no:cacheprovider -n "${GRAPHDBG_CPU_WORKERS:-15}" --durations=10 "$@"
