"""What identifies a person, planted in every place a dump can hold it, and a scan of every byte
of a folder for it: the checks of ``graphdbg redact`` and ``graphdbg share`` (tests/test_redact.py,
tests/test_share.py).

Each secret is a value a person would not want in a bug report: the capturing machine's user,
host (short and fully qualified) and home, and access tokens of the common kinds. ``plant``
puts each in every text field of the manifest, in fields the schema does not know, in
``graph.node_info``, in the recorded environment variables, in graph.py's comments, in the
tensor file's ``__metadata__``, and in files in the dump (a run log, a binary file, a hidden
folder, a link to a file outside it).
``leaks`` finds each in a folder's bytes, as written and in its URL-encoded and JSON-escaped forms.
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

USER = "alice"
HOST = "gpu-node-17"
FQDN = f"{HOST}.cluster.example.com"
HOME = f"/home/{USER}"
TOKENS = {
    "github": "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "github_pat": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ",
    "huggingface": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
    "aws_key_id": "AKIAIOSFODNN7EXAMPLE",
    "aws_secret": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "wandb": "0123456789abcdef0123456789abcdef01234567",
    "slack": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "openai": "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "url_password": "hunter2secret",
}
SECRETS = {"user": USER, "host": HOST, "fqdn": FQDN, **TOKENS}

# A line of text that holds every secret, in the forms they take in logs, messages and paths.
TEXT = (f"run by {USER}@{HOST} on {FQDN}; source file:///home/{USER}/proj/model.py and C:\\Users\\{USER}\\proj\\model.py; "
        f"token {TOKENS['github']} {TOKENS['github_pat']} {TOKENS['huggingface']} key {TOKENS['aws_key_id']} "
        f"aws_secret_access_key={TOKENS['aws_secret']} WANDB_API_KEY={TOKENS['wandb']} slack {TOKENS['slack']} "
        f"openai {TOKENS['openai']} Authorization: Bearer {TOKENS['jwt']} "
        f"clone https://{USER}:{TOKENS['url_password']}@git.example.com/repo.git")


def plant(folder: Path, *, signature: bool = False) -> None:
    """Every kind of secret in every place of the dump ``folder`` (a copy of a real dump);
    ``signature``: in the failure's signature too (a replay of the dump then shows another one)."""
    from graphdbg.store.tensor_header import rewrite_header  # tests/helpers import graphdbg only when used

    manifest_path = folder / "manifest.json"
    m = json.loads(manifest_path.read_text())
    failure = m["failure"]
    failure["message"] = TEXT
    exc = failure.setdefault("exception", {})
    exc["message"] = f"{exc.get('message', '')} ({TEXT})"
    exc["traceback"] = (f'Traceback (most recent call last):\n  File "{HOME}/proj/train.py", line 3, in <module>\n'
                        f"    main()  # {TEXT}\n" + (exc.get("traceback") or ""))
    if signature:
        failure["signature"] = f"{failure.get('signature')} ({TEXT})"
    m["created"] = f"2026-12-07T10:00:00+00:00 {HOST}"
    m["origin"] = {"function": "train", "file": f"{HOME}/proj/train.py", "line": 3, "compile_id": "0/0"}
    m["inputs"][0]["reason"] = TEXT
    m["config"] = {**(m.get("config") or {}), "skipped": {"inductor.cpp.cxx": TEXT}}
    env = m.setdefault("env", {})
    env.update(hostname=FQDN, user=USER, home=HOME, platform=f"Linux-6.1-x86_64 {HOST}", pid=4242,
               argv=[f"{HOME}/proj/train.py", "--hf-token", TOKENS["huggingface"]])
    env["vars"] = {**(env.get("vars") or {}), "TORCH_HF_TOKEN": TOKENS["huggingface"],
                   "TRITON_AWS_SECRET_ACCESS_KEY": TOKENS["aws_secret"], "TORCH_WANDB_API_KEY": TOKENS["wandb"],
                   "TORCH_SLACK_WEBHOOK_TOKEN": TOKENS["slack"], "TORCHINDUCTOR_NOTE": TEXT[:4000],
                   "TORCH_REMOTE": f"https://{USER}:{TOKENS['url_password']}@git.example.com/x"}
    # fields the schema does not know, at every depth
    m["notes"] = {"who": f"{USER}@{HOST}", "text": TEXT}
    failure["operator"] = TEXT
    exc["host"] = FQDN
    m["inputs"][0]["owner"] = TEXT
    env["ssh_client"] = TEXT
    m["dist"]["job_owner"] = TEXT
    node, info = next(iter(m["graph"]["node_info"].items()))
    m["graph"]["node_info"][node] = {**info, "module_type": f"proj.Model ({TEXT[:200]})", "stack_trace": TEXT}
    m["graph"]["secret"] = TEXT
    manifest_path.write_text(json.dumps(m, indent=1))

    graph = folder / m["graph"].get("file", "graph.py")
    graph.write_text(f"# {TEXT}\n# {json.dumps({'HF_TOKEN': TOKENS['huggingface'], 'path': 'C:/Users/' + USER})}\n"
                     + graph.read_text())

    rewrite_header(folder / "inputs.safetensors", lambda h: {**h, "__metadata__": {
        **(h.get("__metadata__") or {}), "owner": f"{USER}@{HOST}", "token": TOKENS["huggingface"], "note": TEXT}})

    (folder / "run.log").write_text("\n".join([
        TEXT, json.dumps({"env": {"HF_TOKEN": TOKENS["huggingface"], "AWS_SECRET_ACCESS_KEY": TOKENS["aws_secret"]},
                          "cwd": f"C:\\Users\\{USER}\\proj", "host": FQDN}),
        f"[{HOST}:0] W1207 {HOME}/proj/train.py:3] {USER} started", urllib.parse.quote(TEXT)]) + "\n")
    (folder / "notes.bin").write_bytes(b"\x00\x01" + TEXT.encode() + b"\x00")
    (folder / ".notes").mkdir()
    (folder / ".notes" / "todo.txt").write_text(TEXT)
    outside = folder.parent / f"{folder.name}.outside.txt"  # a file beside the dump, reached through a link in it
    outside.write_text(TEXT)
    (folder / "profile.txt").symlink_to(outside)


def forms(secret: str) -> set[str]:
    """The ways a secret is written: as is, URL-encoded, JSON-escaped."""
    return {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote(secret), json.dumps(secret)[1:-1]}


def leaks(folder: Path) -> list[str]:
    """'secret in file' for each secret found in any byte of any file under ``folder``."""
    found = []
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        data = path.read_bytes().lower()
        for what, secret in SECRETS.items():
            if any(form.lower().encode() in data for form in forms(secret)):
                found.append(f"{what} in {path.relative_to(folder)}")
    return found
