"""A Ray driver and a local driver over one output share the task plan by claims: the Ray
engine gets only the tasks its driver holds, each task is tokenized once, and both end
with the bytes one driver alone writes."""

from __future__ import annotations

import filecmp
import functools
import json
import os
import subprocess
import sys

import pytest

from megadata_core.preprocess import preprocess_tasks

pytest.importorskip("ray")
from megadata_adapters.engines.ray_preprocess import ray_engine  # noqa: E402

HELPERS = os.path.join(os.path.dirname(__file__), "..", "helpers")
sys.path.insert(0, HELPERS)
from preprocess_hosts_child import SlowTokenizer  # noqa: E402

CHILD = os.path.join(HELPERS, "preprocess_hosts_child.py")
LEASE_S = "5"
TASK_SIZE = 200
DELAY_S = 0.15  # per text: the work outlasts the Ray cluster's start


def test_a_ray_driver_and_a_local_driver_share_the_tasks(tmp_path, monkeypatch):
    texts = [f"document {i} " + "x" * (i % 11) for i in range(96)]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    (tmp_path / "ref").mkdir()
    reference = preprocess_tasks([str(source)], str(tmp_path / "ref" / "c"), SlowTokenizer,
                                 append_eod=True, task_size=TASK_SIZE).output_prefixes["text"]
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HELPERS, *sys.path]),
           "MEGADATA_CLAIM_LEASE_S": LEASE_S, "MEGADATA_HOST_ID": "local"}
    child = subprocess.Popen([sys.executable, CHILD, str(source), str(out / "c"), str(DELAY_S),
                              str(tmp_path / "local.log"), str(TASK_SIZE)], env=env)
    try:
        monkeypatch.setenv("MEGADATA_HOST_ID", "ray")
        monkeypatch.setenv("MEGADATA_CLAIM_LEASE_S", LEASE_S)
        factory = functools.partial(SlowTokenizer, DELAY_S, str(tmp_path / "ray.log"))
        preprocess_tasks([str(source)], str(out / "c"), factory, append_eod=True,
                         task_size=TASK_SIZE, claim_batch=4,
                         engine=ray_engine(num_cpus=2, progress=False))
    finally:
        assert child.wait(timeout=300) == 0
    logs = [(tmp_path / name).read_text().splitlines() if (tmp_path / name).exists() else []
            for name in ("local.log", "ray.log")]
    assert sorted(logs[0] + logs[1]) == sorted(texts)  # each text (so each task) once
    assert logs[1]  # the Ray workers ran tasks their driver held
    for suffix in (".bin", ".idx"):
        assert filecmp.cmp(f"{reference}{suffix}", out / f"c_text_document{suffix}",
                           shallow=False)
    assert sorted(os.listdir(out)) == ["c_text_document.bin", "c_text_document.idx"]
