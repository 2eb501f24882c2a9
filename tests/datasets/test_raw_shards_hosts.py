"""Hosts sharing one cache directory share the tokenizing by shard claims: each shard is
tokenized once, a killed holder's shard is taken over and finished, and every host reads
the samples a single process reads."""

from __future__ import annotations

import filecmp
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from raw_shards_helpers import batches, write_shards

import megadata_core as mdc
from megadata_core.datasets import raw_member
from megadata_core.files.claims import Claims
from megadata_core.preprocess import ByteTokenizer

HELPERS = os.path.join(os.path.dirname(__file__), "..", "helpers")
CHILD = os.path.join(HELPERS, "raw_hosts_child.py")
HOSTS = 4
LEASE_S = 1.5


def single_process(shards, cache) -> tuple[list[int], str]:
    """The batches' token sums of one process alone, and its corpus directory."""
    raw = mdc.RawShards(shards, ByteTokenizer, window=2, piece_size=4096)
    config = mdc.GPTDataConfig(random_seed=7, sequence_length=32, split="100,0,0", eod_id=256,
                               blend=([raw], None), path_to_cache=str(cache))
    train = mdc.build_datasets(config, [400, None, None])[0]
    sums = [int(batch["tokens"].sum()) for batch in batches(train, 10)]
    ends = time.monotonic() + 60
    while not train.corpus.complete() and time.monotonic() < ends:
        time.sleep(0.02)
    directory = train.corpus.directory
    raw_member.stop_raw_corpora()
    return sums, directory


def start_hosts(shards, cache, out, delay: float) -> list[subprocess.Popen]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HELPERS, *sys.path]),
           "MEGADATA_CLAIM_LEASE_S": str(LEASE_S)}
    return [subprocess.Popen([sys.executable, CHILD, str(cache), str(out / f"host{k}.json"),
                              str(delay), *shards], env={**env, "MEGADATA_HOST_ID": f"h{k}"})
            for k in range(HOSTS)]


def results(children, out, hosts) -> dict[int, dict]:
    for child in children:
        assert child.wait(timeout=180) in (0, -signal.SIGKILL)
    return {k: json.loads((out / f"host{k}.json").read_text()) for k in hosts}


def same_shards(directory, reference) -> None:
    names = sorted(os.listdir(os.path.join(reference, "shards")))
    assert sorted(os.listdir(os.path.join(directory, "shards"))) == names
    for name in names:
        assert filecmp.cmp(os.path.join(directory, "shards", name),
                           os.path.join(reference, "shards", name), shallow=False), name
    assert os.path.exists(os.path.join(directory, "corpus.json"))
    assert os.listdir(os.path.join(directory, "pieces")) == []


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hosts")
    shards = write_shards(tmp, counts=(160,) * 8, seed=3)
    sums, directory = single_process(shards, tmp / "alone")
    return shards, sums, directory


def test_four_hosts_tokenize_each_shard_once_and_read_one_process_s_batches(
        tmp_path, reference):
    shards, sums, alone = reference
    children = start_hosts(shards, tmp_path / "cache", tmp_path, 0.002)
    found = results(children, tmp_path, range(HOSTS))
    made = sorted(index for result in found.values() for index in result["made"])
    pieces = len(mdc.preprocess.plan_tasks(shards, 4096))
    assert made == list(range(pieces))  # every piece tokenized, none twice
    assert sum(1 for result in found.values() if result["made"]) >= 2  # the work was shared
    assert all(result["sums"] == sums for result in found.values())
    directory = os.path.join(tmp_path, "cache", "raw", os.path.basename(alone))
    same_shards(directory, alone)


def test_a_killed_claim_holder_s_shard_is_taken_over_and_finished_identical(
        tmp_path, reference):
    shards, sums, alone = reference
    cache = tmp_path / "cache"
    children = start_hosts(shards, cache, tmp_path, 0.004)
    claims = cache / "raw" / os.path.basename(alone) / "claims"
    ends = time.monotonic() + 60
    while time.monotonic() < ends:  # host 0 holds a claim on a shard not yet merged
        held = [name for name in (os.listdir(claims) if claims.exists() else [])
                if not name.startswith(".") and _holder(claims / name) == "h0"]
        if held:
            break
        time.sleep(0.01)
    assert held, "host 0 never held a claim"
    children[0].send_signal(signal.SIGKILL)
    found = results(children, tmp_path, range(1, HOSTS))
    assert all(result["sums"] == sums for result in found.values())
    assert all(result["complete"] for result in found.values())
    same_shards(os.path.join(cache, "raw", os.path.basename(alone)), alone)


def _holder(path) -> str | None:
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return None if body["released"] else body["owner"].rsplit("/", 1)[1]


def test_a_claim_is_exclusive_until_released_or_expired(tmp_path):
    first = Claims(str(tmp_path), lease=0.3, owner="a")
    second = Claims(str(tmp_path), lease=0.3, owner="b")
    assert first.try_claim("s") and not second.try_claim("s")
    time.sleep(0.5)  # first beats: its claim stays
    assert not second.try_claim("s") and first.holds("s")
    first.release("s")
    assert second.try_claim("s") and not first.try_claim("s")
    second._stop.set()  # second stops beating (as if it died) ...
    second._thread.join()
    deadline = time.monotonic() + 5
    while not first.try_claim("s"):  # ... and is taken over after the lease
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert sorted(os.listdir(tmp_path)) == ["s.000000", "s.000001", "s.000002"]
    first.close()
    second.close()


def test_a_lease_that_is_no_number_of_seconds_is_refused(tmp_path):
    with pytest.raises(mdc.DataError, match="claim lease"):
        Claims(str(tmp_path), lease=0)
