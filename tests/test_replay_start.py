"""An isolated replay of a CPU dump doesn't import torch in the process the user started: the
child does the work (and checks the inputs fit before it loads them). Issue 26: start-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

# The CLI in a process where importing torch fails: whatever needs torch must happen in the child.
PROBE = """
import sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("the replay's parent imported torch")
sys.meta_path.insert(0, NoTorch())
from graphdbg.ui.cli import main
sys.argv = ["graphdbg", *sys.argv[1:]]
try:
    main()
except SystemExit as e:
    code = e.code
print("exit", code, "torch" in sys.modules, file=sys.stderr)
"""


def _cli_without_torch(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", PROBE, *map(str, args)], env=env, capture_output=True, text=True, timeout=300)


def _dump(name: str) -> Path:
    return next((FIXTURES / name).glob("rank*/*"))


def test_an_isolated_replay_of_a_cpu_dump_runs_without_torch_in_the_parent():
    r = _cli_without_torch("replay", _dump("block_accuracy"), "--backend", "eager", "--json")
    assert r.stderr.strip().splitlines()[-1] == "exit 0 False", r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["status"] == "pass" and out["isolated"] is True and out["device"] == "cpu", out


def test_inputs_too_large_are_refused_by_the_child_in_one_line():
    r = _cli_without_torch("replay", _dump("block_accuracy"), "--backend", "eager", "--max-input-gb", "0.0000001")
    lines = r.stderr.strip().splitlines()
    assert lines[-1] == "exit 2 False" and len(lines) == 2, r.stderr[-3000:]
    assert lines[0].startswith("graphdbg: error: the graph's inputs need") and "--max-input-gb" in lines[0], lines


# The child side alone, on a request an isolated replay's parent wrote: the dump folder's
# manifest comes as JSON in the request, and the child makes its model (Dump.manifest) once.
CHILD = """
import json, sys
from pathlib import Path
from graphdbg.formats import load
from graphdbg.execution import child
import graphdbg.store.schema as schema
dump = load(sys.argv[1])
folder = Path(sys.argv[2])
request = {"dump": str(dump.path), "manifest": dump.manifest_data, "backend": "eager", "passes": None, "device": "cpu", "options": {}}
(folder / "request.json").write_text(json.dumps(request))
made = []
schema.manifest_model = lambda data, where, made_by=schema.manifest_model: made.append(where) or made_by(data, where)
child.main(str(folder / "request.json"), str(folder / "outcome.json"))
print(json.loads((folder / "outcome.json").read_text())["status"], len(made))
"""


def test_the_child_takes_the_manifest_its_parent_checked(tmp_path):
    r = subprocess.run([sys.executable, "-c", CHILD, str(_dump("block_accuracy")), str(tmp_path)], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0 and r.stdout.split() == ["pass", "1"], (r.stdout, r.stderr[-3000:])
