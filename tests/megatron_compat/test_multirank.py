"""A real two-rank job (gloo on 127.0.0.1): rank 0 builds the index cache, rank 1 loads
it, and both serve megatron-core's samples."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
from compat_helpers import build, theirs
from multirank_worker import CONFIG, SIZES, WEIGHTS, samples

from loopback.object_stores import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WATCHDOG_S = 300  # a hang (a rank stuck in a barrier) fails the test


def _run_ranks(world: int, cache: str, out: str, prefixes: list[str]) -> None:
    port = free_port()
    env = dict(os.environ, PYTHONPATH=ROOT)
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    worker = os.path.join(HERE, "multirank_worker.py")
    procs = [
        subprocess.Popen(
            [sys.executable, worker, str(rank), str(world), str(port), cache, out, *prefixes],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for rank in range(world)
    ]
    logs = []
    try:
        for proc in procs:
            logs.append(proc.communicate(timeout=WATCHDOG_S)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for rank, (proc, log) in enumerate(zip(procs, logs)):
        assert proc.returncode == 0, f"rank {rank}:\n{log[-4000:]}"


def test_rank0_builds_rank1_loads(corpora, tmp_path):
    prefixes = corpora(3, seed=5)
    cache = tmp_path / "cache"
    cache.mkdir()
    _run_ranks(2, str(cache), str(tmp_path), prefixes)
    ranks = [dict(np.load(tmp_path / f"rank{rank}.npz")) for rank in range(2)]
    writes = [json.loads(str(rank.pop("writes"))) for rank in ranks]
    # rank 0 wrote the entry (arrays and description); rank 1 wrote none of it, at most
    # the record of the files it verified
    assert any(name.endswith("-description.json") for name in writes[0])
    assert any(name.endswith(".npy") for name in writes[0])
    assert [name for name in writes[1] if not name.endswith("-verified.json")] == []
    on_disk = sorted(os.listdir(cache))
    assert set(on_disk) <= set(writes[0]) | {name for name in writes[1]}
    # identical samples on both ranks, equal to megatron-core's (built here, no cache)
    assert sorted(ranks[0]) == sorted(ranks[1])
    for key in ranks[0]:
        assert np.array_equal(ranks[0][key], ranks[1][key]), key
    reference = build(theirs, "GPTDataset", SIZES, blend=(prefixes, WEIGHTS), **CONFIG)
    expected = samples(reference)
    expected["dataset_index"] = np.asarray(reference[0].dataset_index)
    assert sorted(expected) == sorted(ranks[1]) and len(expected) > 100
    for key in expected:
        assert np.array_equal(expected[key], ranks[1][key]), key
        assert expected[key].dtype == ranks[1][key].dtype, key
