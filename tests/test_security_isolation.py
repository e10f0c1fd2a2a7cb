"""Isolated replays end, whatever the backend does: small Python backends that misbehave.

The backends below run in the replay's child process (the CLI's default ``--isolate``). They
leave grandchildren holding the output, start a grandchild in its own session, flood the
output, raise an exception whose ``__str__`` raises, or sleep until the parent is signalled.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT

import graphdbg

DUMP = FIXTURES / "block_compile_error"
NOTES = "GRAPHDBG_TEST_NOTES"
SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]


def _note(name: str, value: object) -> None:
    Path(os.environ[NOTES], name).write_text(str(value))


def leaves_a_grandchild_holding_the_output(gm, example_inputs):
    _note("grandchild", subprocess.Popen(SLEEPER).pid)  # inherits the child's stdout and stderr
    return gm.forward


def leaves_a_grandchild_in_its_own_session(gm, example_inputs):
    _note("grandchild", subprocess.Popen(SLEEPER, start_new_session=True).pid)
    return gm.forward


def floods_the_output(gm, example_inputs):
    line = "x" * (1 << 20) + "\n"
    for _ in range(256):
        sys.stdout.write(line)
        sys.stderr.write(line)
    sys.stdout.flush()
    sys.stderr.write("the last words\n")
    sys.stderr.flush()
    return gm.forward


class StrRaises(RuntimeError):
    def __str__(self):
        raise ValueError("__str__ itself fails")


def raises_an_unprintable_exception(gm, example_inputs):
    raise StrRaises()


def sleeps_until_killed(gm, example_inputs):
    _note("tmp", Path(sys.argv[1]).parent)  # the child's request lives in the replay's temporary folder
    _note("grandchild", subprocess.Popen(SLEEPER).pid)
    _note("child", os.getpid())
    time.sleep(300)
    return gm.forward


def sleeps_beside_a_grandchild_out_of_its_group_and_token(gm, example_inputs):
    _note("tmp", Path(sys.argv[1]).parent)
    _note("grandchild", subprocess.Popen(SLEEPER, start_new_session=True, env={}).pid)  # no group, no token
    _note("child", os.getpid())
    time.sleep(300)
    return gm.forward


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.fixture
def notes(tmp_path, monkeypatch):
    folder = tmp_path / "notes"
    folder.mkdir()
    monkeypatch.setenv(NOTES, str(folder))
    monkeypatch.setenv("GRAPHDBG_SANDBOX_WRITABLE", str(folder))  # the sandboxed child writes its notes here
    return folder


def _wait_for(path: Path, seconds: float) -> None:
    end = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["leaves_a_grandchild_holding_the_output", "leaves_a_grandchild_in_its_own_session"])
def test_a_grandchild_does_not_hold_the_replay_and_is_killed(backend, notes, cli):
    r = cli("replay", DUMP, "--backend", f"test_security_isolation:{backend}", "--timeout", "120", "--json")
    assert r.code == 0, r
    # a pass, not a timeout: done when the child is done (within --timeout 120), not when the
    # grandchild (asleep for 300 s) lets go of the output
    assert json.loads(r.out)["status"] == "pass"
    pid = int((notes / "grandchild").read_text())
    end = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < end:
        time.sleep(0.1)
    assert not _alive(pid)


@pytest.mark.slow
def test_flooded_output_is_capped_and_costs_no_memory(notes, cli):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = cli("replay", DUMP, "--backend", "test_security_isolation:floods_the_output", "--timeout", "300", "--json")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert r.code == 0, r
    data = json.loads(r.out)
    assert data["status"] == "pass"
    assert data["stderr_tail"] is None or len(data["stderr_tail"]) <= 3000
    assert grown_mb < 100, f"the parent grew by {grown_mb:.0f} MB while the child wrote 512 MB"


@pytest.mark.parametrize("backward", [False, True])  # the forward and the training replay: one unwrap, one signature
@pytest.mark.parametrize("direct", [True, False])
def test_an_exception_whose_str_raises_is_an_outcome(direct, backward):
    case = graphdbg.load(DUMP).case("cpu")
    outcome = case.run("test_security_isolation:raises_an_unprintable_exception", direct=direct, backward=backward)
    assert outcome.status == "crash" and outcome.error_type == "StrRaises"
    assert outcome.message == "<str() of StrRaises raised ValueError>"
    assert outcome.signature.startswith("StrRaises: <str() of StrRaises raised ValueError>")


def _signal_the_replay(backend: str, sig: int, notes: Path) -> tuple[int, str, list[int]]:
    """Replay DUMP with ``backend`` in a CLI process, signal it once the child has noted itself:
    the CLI's exit status and stderr, and the processes the child noted (child, grandchild)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "helpers"), str(ROOT / "tests"), str(ROOT)]), NOTES: str(notes)}
    parent = subprocess.Popen([sys.executable, "-m", "graphdbg.ui.cli", "replay", str(DUMP), "--backend",
                               f"test_security_isolation:{backend}", "--timeout", "600"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(notes / "child", 240)
        pids = [int((notes / "child").read_text()), int((notes / "grandchild").read_text())]
        assert _alive(pids[0]) and Path((notes / "tmp").read_text()).exists()
        parent.send_signal(sig)
        _, err = parent.communicate(timeout=60)
    finally:
        if parent.poll() is None:
            parent.kill()
    end = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < end:
        time.sleep(0.1)
    return parent.returncode, err, pids


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_to_the_parent_end_the_child_group_and_its_folder(sig, notes):
    returncode, err, pids = _signal_the_replay("sleeps_until_killed", sig, notes)
    assert returncode != 0
    assert not any(_alive(pid) for pid in pids)
    assert not Path((notes / "tmp").read_text()).exists()
    assert "Traceback" not in err, err[-2000:]


@pytest.mark.slow
def test_the_end_of_a_replay_kills_a_grandchild_out_of_its_group_and_token(notes):
    """A grandchild that left the child's process group and cleared its environment is found
    by its parent, the child, which still lives when the replay ends."""
    returncode, _, pids = _signal_the_replay("sleeps_beside_a_grandchild_out_of_its_group_and_token", signal.SIGTERM, notes)
    assert returncode != 0
    assert not any(_alive(pid) for pid in pids)
    assert not Path((notes / "tmp").read_text()).exists()


def test_capture_records_an_exception_whose_str_raises(tmp_path):
    import torch

    compiled = torch.compile(lambda x: torch.nn.functional.gelu(x) + 1,
                             backend=graphdbg.capture(raises_an_unprintable_exception, dump_dir=tmp_path))
    with pytest.raises(Exception):
        compiled(torch.ones(4))
    dump = graphdbg.load(next(tmp_path.rglob("manifest.json")).parent)
    assert dump.error_type == "StrRaises" and dump.message == "<str() of StrRaises raised ValueError>"


def test_a_dumps_replays_share_a_compiler_cache_of_their_own(tmp_path, monkeypatch):
    """An isolated replay compiles into a cache kept for its dump alone: warm on its second replay,
    never the user's own cache, and another dump (or this one changed) gets another folder."""
    import shutil

    from graphdbg.execution.sandbox import WRITABLE_ENV, child_env

    monkeypatch.setenv("GRAPHDBG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "users-own"))
    dump = tmp_path / "d"
    shutil.copytree(next((FIXTURES / "block_runtime_error" / "rank0").iterdir()), dump)
    first = child_env(tmp_path / "c1", "cpu", str(dump))
    again = child_env(tmp_path / "c2", "cpu", str(dump))
    assert first["TORCHINDUCTOR_CACHE_DIR"] == again["TORCHINDUCTOR_CACHE_DIR"]
    assert first["TORCHINDUCTOR_CACHE_DIR"].startswith(str(tmp_path / "cache" / "compile"))
    assert first["TORCHINDUCTOR_CACHE_DIR"].rpartition("/")[0] in first[WRITABLE_ENV]
    other = tmp_path / "other"
    shutil.copytree(dump, other)
    assert child_env(tmp_path / "c3", "cpu", str(other))["TORCHINDUCTOR_CACHE_DIR"] != first["TORCHINDUCTOR_CACHE_DIR"]
    (dump / "graph.py").write_text((dump / "graph.py").read_text() + "\n# changed\n")
    assert child_env(tmp_path / "c4", "cpu", str(dump))["TORCHINDUCTOR_CACHE_DIR"] != first["TORCHINDUCTOR_CACHE_DIR"]
    private = child_env(tmp_path / "c5", "cpu")  # a Case saved for one replay: its own folder
    assert private["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "c5" / "inductor")
