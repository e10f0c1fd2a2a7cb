"""The three end-to-end stories of examples/, on the GPU machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

pytestmark = pytest.mark.gpu


def _story(name: str, tmp_path) -> dict:
    env = {**os.environ, "OUT": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "examples"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / f"{name}.py")], env=env, capture_output=True, text=True,
                          timeout=900)
    path = tmp_path / f"{name.split('_')[0]}.json"  # story1_thunder_streams.py writes story1.json
    assert path.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(path.read_text())


def test_story1_thunder_cannot_handle_streams(tmp_path):
    pytest.importorskip("thunder")
    r = _story("story1_thunder_streams", tmp_path)
    assert r["user_error_unchanged"] and r["signature"] == "AssertionError: Failed to find method wait_stream"
    assert len(r["streams"]) == 2 and all(s["device"] == "cuda:0" for s in r["streams"])
    assert r["replay_thunder"]["exit"] == 1 and r["replay_thunder"]["reproduces"]
    assert r["replay_inductor"]["status"] == "pass" and r["replay_inductor"]["reference"] == "eager"
    assert r["minify_thunder"]["exit"] == 0 and r["minify_thunder"]["final_nodes"] < r["nodes"] / 2, r["minify_thunder"].get("error")


def test_story2_fusion_pass_and_its_buggy_successor(tmp_path):
    r = _story("story2_fusion_pass", tmp_path)
    (good,) = r["replay_good"]["passes"]
    assert r["replay_good"]["status"] == "pass" and good["result"] == 4  # two add+RMSNorm pairs per layer, two layers
    assert r["replay_good_buggy"]["status"] == "mismatch"
    assert r["bisect_passes"]["culprit"].startswith("llama_fusion:use_flashinfer_kernel")
    assert r["bisect_nodes"]["node"] is not None and "llama_fusion.py" in (r["bisect_nodes"]["source"] or "")


def test_story3_silently_wrong_attention(tmp_path):
    r = _story("story3_int8_attention", tmp_path)
    assert not r["user_saw_an_error"] and r["output_finite"]
    assert r["captured"]["kind"] == "accuracy"
    assert r["replay_own_backend"]["status"] == "mismatch"
    assert r["replay_inductor_with_selection"]["status"] == "mismatch"
    assert r["replay_plain_inductor"]["status"] == "pass"
    assert "int8_attention" in (r["bisect_nodes"]["target"] or "") or "scaled_dot_product_attention" in (r["bisect_nodes"]["code"] or "")
