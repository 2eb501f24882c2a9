"""Several drivers over one output (as on machines sharing a file system) share the task
plan by claims: each task is tokenized once, a SIGKILLed driver's task is taken over once
its claim expires, and every driver ends with the bytes one driver alone writes."""

from __future__ import annotations

import filecmp
import functools
import json
import os
import signal
import subprocess
import sys
import time

from megadata_core.preprocess import preprocess_tasks

HELPERS = os.path.join(os.path.dirname(__file__), "..", "helpers")
sys.path.insert(0, HELPERS)
from preprocess_hosts_child import SlowTokenizer  # noqa: E402

CHILD = os.path.join(HELPERS, "preprocess_hosts_child.py")
DRIVERS = 4
LEASE_S = 5.0  # beats every 1.25 s: a loaded machine must not stall one past a lease
TASK_SIZE = 200  # bytes: about 7 lines a task
DELAY_S = 0.08  # per text: the tasks outlast the drivers' start-up


def _inputs(tmp_path, count: int = 96) -> tuple[str, list[str]]:
    texts = [f"document {i} " + "x" * (i % 11) for i in range(count)]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return str(path), texts


def _reference(tmp_path, source: str) -> str:
    (tmp_path / "ref").mkdir()
    summary = preprocess_tasks([source], str(tmp_path / "ref" / "c"),
                               functools.partial(SlowTokenizer), append_eod=True,
                               task_size=TASK_SIZE)
    return summary.output_prefixes["text"]


def _start(tmp_path, source: str) -> list[subprocess.Popen]:
    (tmp_path / "out").mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HELPERS, *sys.path]),
           "MEGADATA_CLAIM_LEASE_S": str(LEASE_S)}
    return [subprocess.Popen([sys.executable, CHILD, source, str(tmp_path / "out" / "c"),
                              str(DELAY_S), str(tmp_path / f"h{k}.log"), str(TASK_SIZE)],
                             env={**env, "MEGADATA_HOST_ID": f"h{k}"})
            for k in range(DRIVERS)]


def _encoded(tmp_path) -> dict[int, list[str]]:
    logs = {}
    for k in range(DRIVERS):
        path = tmp_path / f"h{k}.log"
        logs[k] = path.read_text().splitlines() if path.exists() else []
    return logs


def _check_output(tmp_path, reference: str) -> None:
    out = tmp_path / "out"
    for suffix in (".bin", ".idx"):
        assert filecmp.cmp(f"{reference}{suffix}",
                           out / f"c_text_document{suffix}", shallow=False)
    # nothing left behind: no work directory (claims inside), no temporaries
    assert sorted(os.listdir(out)) == ["c_text_document.bin", "c_text_document.idx"]


def test_four_drivers_share_the_tasks_each_tokenized_once(tmp_path):
    source, texts = _inputs(tmp_path)
    reference = _reference(tmp_path, source)
    children = _start(tmp_path, source)
    for child in children:
        assert child.wait(timeout=300) == 0
    logs = _encoded(tmp_path)
    encoded = sum(logs.values(), [])
    assert sorted(encoded) == sorted(texts)  # every text (so every task) exactly once
    assert sum(1 for lines in logs.values() if lines) >= 2  # the work was shared
    _check_output(tmp_path, reference)


def test_a_killed_drivers_task_is_taken_over(tmp_path):
    source, texts = _inputs(tmp_path)
    reference = _reference(tmp_path, source)
    children = _start(tmp_path, source)
    victim, log = children[0], tmp_path / "h0.log"
    deadline = time.monotonic() + 120  # a watchdog against a hang, not a timing check
    while not (log.exists() and log.read_text()):  # h0 is encoding a task it holds
        assert victim.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=60) == -signal.SIGKILL
    for child in children[1:]:
        assert child.wait(timeout=300) == 0
    logs = _encoded(tmp_path)
    assert set(sum(logs.values(), [])) == set(texts)
    # only the killed driver's task was tokenized twice: the others once each
    survivors = sum((logs[k] for k in range(1, DRIVERS)), [])
    assert len(survivors) == len(set(survivors))
    _check_output(tmp_path, reference)
