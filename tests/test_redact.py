"""Dumps safe to share: `graphdbg redact` and capture's redact option keep what show and replay
need (source lines, relative to the project) and drop host, user, pid and command line."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import planted_secrets
import pytest
import torch
from conftest import FIXTURES, ROOT, child_env

import graphdbg
from fixtures import programs
from graphdbg.store.manifest import find_dumps
from graphdbg.store.redact import known_fields


def _capture(dump_dir: Path, **options) -> Path:
    model, x = programs.tiny_block()
    try:
        with torch.no_grad():
            torch.compile(model, backend=graphdbg.capture(programs.refuses_gelu, dump_dir=dump_dir, **options))(x)
    except Exception:
        pass
    (path,) = find_dumps(dump_dir)
    return path


def _text_of(folder: Path) -> str:
    return (folder / "manifest.json").read_text() + (folder / "graph.py").read_text()


def _assert_redacted(folder: Path) -> None:
    m = json.loads((folder / "manifest.json").read_text())
    assert m["redacted"] is True
    assert set(m["env"]) <= {"graphdbg", "torch", "triton", "python", "platform", "cuda", "driver", "device_name", "cuda_devices",
                             "argv", "device", "backend_package", "backend_version", "settings", "vars"}
    assert "hostname" not in m["env"] and "pid" not in m["env"]
    text = _text_of(folder)
    assert str(ROOT) not in text and sys.prefix not in text and str(Path.home()) + "/" not in text
    host = socket.gethostname()
    if len(host) >= 4:
        assert host not in text
    # source lines survive, relative to the project root
    assert "# File: fixtures/programs.py:" in (folder / "graph.py").read_text()


def test_redact_command_makes_a_captured_dump_shareable(cli, tmp_path):
    original = _capture(tmp_path / "dumps")
    m = json.loads((original / "manifest.json").read_text())
    assert m["env"]["hostname"] and str(ROOT) in _text_of(original)  # what a dump records by default

    r = cli("redact", tmp_path / "dumps", "-o", tmp_path / "shared")
    assert r.code == 0, r
    (shared,) = find_dumps(tmp_path / "shared")
    assert shared.relative_to(tmp_path / "shared") == original.relative_to(tmp_path / "dumps")
    _assert_redacted(shared)
    assert str(ROOT) in _text_of(original)  # -o leaves the original alone
    red = json.loads((shared / "manifest.json").read_text())
    assert red["env"]["argv"] == [Path(m["env"]["argv"][0]).name]
    # the user's frames, relative to the project; the traceback starts at theirs, not at graphdbg's wrapper that caught it
    assert 'File "fixtures/programs.py"' in red["failure"]["exception"]["traceback"]
    assert "graphdbg/capture/hook.py" not in red["failure"]["exception"]["traceback"]
    assert red["failure"]["exception"]["traceback"].splitlines()[1].startswith('  File "fixtures/programs.py"')
    assert "<site-packages>/torch/" in red["failure"]["exception"]["traceback"] or "site-packages" not in m["failure"]["exception"]["traceback"]
    # the graph and its values are untouched
    assert red["graph"] == {**m["graph"], "node_info": red["graph"]["node_info"]}
    assert (shared / "inputs.safetensors").read_bytes() == (original / "inputs.safetensors").read_bytes()

    # show and replay still work, with source lines relative to the project
    r = cli("show", shared, "--json")
    assert r.code == 0, r
    gelu = next(n for n in json.loads(r.out)["nodes_table"] if n["target"] == "torch._C._nn.gelu")
    assert gelu["source"].startswith("fixtures/programs.py:")
    r = cli("replay", shared, "--no-isolate", "--trust-backend")
    assert r.code == 1 and "no lowering for gelu" in r.out, r


def test_redact_in_place_and_again(cli, tmp_path):
    dump = _capture(tmp_path / "dumps")
    assert cli("redact", dump).code == 0
    _assert_redacted(dump)
    before = _text_of(dump)
    r = cli("redact", dump, "--json")
    assert r.code == 0 and json.loads(r.out)[0]["paths"] == 0 and json.loads(r.out)[0]["removed"] == [] and _text_of(dump) == before


def test_capture_can_write_redacted_dumps(tmp_path):
    dump = _capture(tmp_path / "dumps", redact=True)
    _assert_redacted(dump)
    assert graphdbg.load(dump).failure_kind == "compile_error"


SCRIPT = """
import sys, torch
sys.path.insert(0, {root!r})
from fixtures import programs
model, x = programs.tiny_block()
torch.compile(model, backend=programs.refuses_gelu)(x)
"""


@pytest.mark.slow
def test_capture_command_redact_flag(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(root=str(ROOT)))
    dumps = tmp_path / "dumps"
    env = child_env()
    done = subprocess.run([sys.executable, "-m", "graphdbg.ui.cli", "capture", "--redact", "--dump-dir", str(dumps), "--",
                           sys.executable, str(script), "--secret-flag"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    (dump,) = find_dumps(dumps)
    _assert_redacted(dump)
    m = json.loads((dump / "manifest.json").read_text())
    assert m["env"]["argv"] == ["train.py"] and "--secret-flag" not in _text_of(dump) and str(tmp_path) not in _text_of(dump)


def test_committed_fixtures_are_redacted():
    for manifest in FIXTURES.glob("*/rank*/*/manifest.json"):
        _assert_redacted_fixture(manifest.parent)


def _assert_redacted_fixture(folder: Path) -> None:
    m = json.loads((folder / "manifest.json").read_text())
    assert m.get("redacted") is True, folder
    assert "hostname" not in m["env"] and "pid" not in m["env"], folder
    assert "/work/" not in _text_of(folder) and "/home/" not in _text_of(folder), folder


def test_redact_refuses_what_is_not_a_dump(cli, tmp_path):
    r = cli("redact", tmp_path)
    assert r.code == 2 and "no graphdbg dump here" in r.err, r


# --- what identifies a person: planted in every place, scanned for in every byte written ----------

def _planted(tmp_path: Path) -> Path:
    src = next((FIXTURES / "block_compile_error").glob("rank0/g0-*"))
    folder = tmp_path / "dumps" / "rank0" / src.name
    shutil.copytree(src, folder)
    planted_secrets.plant(folder, signature=True)
    assert len(planted_secrets.leaks(folder)) >= len(planted_secrets.SECRETS)  # each is there to find
    return folder


def _still_replays(cli, folder: Path) -> None:
    """It replays to the captured exception; the recorded signature held a secret, so it reads as another (exit 4)."""
    r = cli("replay", folder, "--no-isolate", "--trust-backend")
    assert r.code == 4 and "no lowering for gelu" in r.out and "<secret>" in r.out, r


@pytest.mark.parametrize("where", ["copy", "in_place"])
def test_redact_leaves_no_secret_in_any_byte(cli, tmp_path, where):
    folder = _planted(tmp_path)
    if where == "copy":
        r = cli("redact", tmp_path / "dumps", "-o", tmp_path / "shared", "--json")
        out = tmp_path / "shared" / "rank0" / folder.name
    else:
        r = cli("redact", folder, "--json")
        out = folder
    assert r.code == 0, r
    assert planted_secrets.leaks(out) == []
    report = json.loads(r.out)[0]
    for removed in ("unknown:notes", "unknown:graph.node_info.", "unknown:inputs[0].owner", "unknown:env.ssh_client",
                    "tensor_metadata:owner", "file:notes.bin", "vars.TORCH_HF_TOKEN", "vars.TRITON_AWS_SECRET_ACCESS_KEY",
                    "vars.TORCH_WANDB_API_KEY", "hostname", "user", "home", "pid", "argv"):
        assert any(item.startswith(removed) for item in report["removed"]), (removed, report["removed"])
    m = json.loads((out / "manifest.json").read_text())
    assert m["env"]["vars"]["TORCH_HF_TOKEN"] == "<redacted>" and "<secret>" in m["failure"]["message"]
    assert "<user>@<host>" in (out / "run.log").read_text()
    assert not any(os.path.lexists(out / name) for name in ("notes.bin", ".notes", "profile.txt"))
    # the redacted dump is a dump: it loads, its tensor file is whole, and it replays to the same failure
    assert (out / "inputs.safetensors").stat().st_size == (FIXTURES / "block_compile_error").glob(
        "rank0/g0-*").__next__().joinpath("inputs.safetensors").stat().st_size
    assert graphdbg.load(out).failure_kind == "compile_error"
    _still_replays(cli, out)
    again = cli("redact", out, "--json")  # nothing left to remove
    assert again.code == 0 and json.loads(again.out)[0]["removed"] == [], again


def test_capture_records_who_captured_and_redact_removes_it(cli, tmp_path):
    import getpass

    dump = _capture(tmp_path / "dumps")
    env = json.loads((dump / "manifest.json").read_text())["env"]
    assert env["user"] == getpass.getuser() and env["home"] == str(Path.home()) and env["hostname"] == socket.gethostname()
    assert cli("redact", dump).code == 0
    env = json.loads((dump / "manifest.json").read_text())["env"]
    assert not {"user", "home", "hostname", "pid"} & set(env)


def test_redact_keeps_every_field_graphdbg_writes():
    """Unknown fields are dropped; none of those graphdbg itself writes is unknown (store.redact.OWN_EXTRAS)."""
    for manifest in FIXTURES.glob("*/rank*/*/manifest.json"):
        assert known_fields(json.loads(manifest.read_text()))[1] == [], manifest


def test_token_shapes_and_what_they_leave(tmp_path):
    from graphdbg.store.redact import Redactor, hide_secrets

    for secret in planted_secrets.TOKENS.values():
        assert secret not in hide_secrets(planted_secrets.TEXT)
    # what looks like a token but is not one stays: hashes, ids, versions, counts, decorators
    kept = ("graph 3b0e02565448551505e11791ab91fce41a3a94aa21d8b3a10c787dec55e1f175 id g0-compile_error-3b0e0256 "
            "torch 2.5.0+git1a2b3c4 max_tokens=1048576 num_tokens: 128 @torch.compile triton@3.1 skip-connection task-123 "
            "tokens = model.generate(inputs) api_key=tokenizer")
    assert Redactor(None, users=["alice"], hosts=[planted_secrets.FQDN]).text(kept) == kept
    for text in ("password: correcthorsebatterystaple", 'secret_key = "s3cr3t-value"', "-H 'Authorization: Basic YWxhZGRpbjpvcGVu'"):
        assert hide_secrets(text).endswith(("<secret>", '<secret>"', "<secret>'")), text


def test_redacting_text_takes_time_in_proportion_to_its_size():
    """A run log is any text: long runs of one character class cost no more than ordinary text
    (a pattern that backtracks over them takes minutes on a megabyte)."""
    import time

    from graphdbg.store.redact import Redactor

    redactor = Redactor(None, users=["alice"], hosts=[planted_secrets.FQDN], homes=[planted_secrets.HOME])
    for text in ("a-" * 50_000, "a." * 50_000, "%41" * 30_000, "token=" * 20_000, "sk-" + "a-" * 50_000, "/home/" * 20_000,
                 "a@" * 50_000, "gpu-node-17" + ".a" * 50_000 + "_"):
        start = time.perf_counter()
        redactor.text(text)
        assert time.perf_counter() - start < 5, text[:20]


def test_redact_removes_the_names_every_dump_recorded(cli, tmp_path):
    """A log of one rank names another rank's host; a backward dump's forward/ was captured by another user."""
    src = next((FIXTURES / "block_compile_error").glob("rank0/g0-*"))
    first, second = tmp_path / "dumps" / "rank0" / src.name, tmp_path / "dumps" / "rank1" / src.name
    for folder, host, user in ((first, "trainer-a-01", "carolyn"), (second, "trainer-b-07", "bobsmith")):
        shutil.copytree(src, folder)
        m = json.loads((folder / "manifest.json").read_text())
        m["env"].update(hostname=host, user=user, home=f"/data/{user}")
        (folder / "manifest.json").write_text(json.dumps(m))
    forward = first / "forward"
    shutil.copytree(src, forward)
    m = json.loads((forward / "manifest.json").read_text())
    m.update(backward_dump="..", env={**m["env"], "hostname": "trainer-c-33", "user": "davidlee"})
    (forward / "manifest.json").write_text(json.dumps(m))
    log = "rank 1 on trainer-b-07 (bobsmith), forward on trainer-c-33 by davidlee, rank 0 on trainer-a-01 by carolyn\n"
    (first / "run.log").write_text(log)
    (forward / "run.log").write_text(log)
    r = cli("redact", tmp_path / "dumps", "-o", tmp_path / "shared")
    assert r.code == 0, r
    for path in (tmp_path / "shared").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not any(name in data for name in (b"trainer-", b"bobsmith", b"davidlee", b"carolyn")), path
