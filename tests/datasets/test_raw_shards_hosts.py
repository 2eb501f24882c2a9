"""Hosts sharing one cache directory, or one S3 bucket (moto's server on 127.0.0.1) with a
cache directory each, share the tokenizing by shard claims: each shard is tokenized
once, a killed holder's shard is taken over and finished, and every host reads the
samples a single process reads."""

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
from loopback.object_stores import MotoS3Server
from megadata_core.datasets import raw_member
from megadata_core.files.claims import Claims, open_store
from megadata_core.preprocess import ByteTokenizer

HELPERS = os.path.join(os.path.dirname(__file__), "..", "helpers")
CHILD = os.path.join(HELPERS, "raw_hosts_child.py")
HOSTS = 4
LEASE_S = 5.0  # beats every 1.25 s: a loaded machine must not stall one past a lease


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


def start_hosts(shards, cache, out, delay: float, shared: dict | None = None
                ) -> list[subprocess.Popen]:
    """``HOSTS`` host processes over one cache directory, or (``shared``: the store's
    environment) one cache directory each, ``{cache}{k}``, sharing the store."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HELPERS, *sys.path]),
           "MEGADATA_CLAIM_LEASE_S": str(LEASE_S), **(shared or {})}
    return [subprocess.Popen([sys.executable, CHILD, f"{cache}{k}" if shared else str(cache),
                              str(out / f"host{k}.json"), str(delay), *shards],
                             env={**env, "MEGADATA_HOST_ID": f"h{k}"})
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


class Hosts:
    """``HOSTS`` host processes sharing one cache directory ("directory") or one bucket
    prefix with a cache each ("bucket"); ``claims``: the store of their claims."""

    def __init__(self, where: str, request, tmp_path, reference, delay: float) -> None:
        shards, _, alone = reference
        self.key, self.tmp_path, self.where = os.path.basename(alone), tmp_path, where
        environment = None
        if where == "bucket":
            environment = {**request.getfixturevalue("bucket"),
                           "RAW_HOSTS_SHARED": f"s3://shared/{request.node.name}"}
            monkeypatch = request.getfixturevalue("monkeypatch")
            for name, value in environment.items():
                monkeypatch.setenv(name, value)
            self.claims = open_store(f"s3://shared/{request.node.name}/{self.key}/claims")
        else:
            self.claims = open_store(str(tmp_path / "cache" / "raw" / self.key / "claims"))
        self.children = start_hosts(shards, tmp_path / "cache", tmp_path, delay, environment)

    def directory(self, k: int) -> str:
        """Host ``k``'s corpus directory."""
        cache = f"{self.tmp_path / 'cache'}{k}" if self.where == "bucket" else \
            str(self.tmp_path / "cache")
        return os.path.join(cache, "raw", self.key)

    def holders(self) -> list[str | None]:
        """The host holding each claim (None: released)."""
        return [_owner(self.claims.read(name) or b"") for name in self.claims.names("")
                if not name.startswith(".")]


@pytest.mark.parametrize("where", ["directory", "bucket"])
def test_four_hosts_tokenize_each_shard_once_and_read_one_process_s_batches(
        where, request, tmp_path, reference):
    shards, sums, alone = reference
    hosts = Hosts(where, request, tmp_path, reference, 0.002)
    found = results(hosts.children, tmp_path, range(HOSTS))
    made = sorted(index for result in found.values() for index in result["made"])
    pieces = len(mdc.preprocess.plan_tasks(shards, 4096))
    assert made == list(range(pieces))  # every piece tokenized, none twice
    assert sum(1 for result in found.values() if result["made"]) >= 2  # the work was shared
    assert all(result["sums"] == sums for result in found.values())
    for k in range(HOSTS):  # with a bucket, every host merged every shard itself
        same_shards(hosts.directory(k), alone)
    holders = hosts.holders()
    assert holders and holders == [None] * len(holders)  # every claim released


@pytest.mark.parametrize("where", ["directory", "bucket"])
def test_a_killed_claim_holder_s_shard_is_taken_over_and_finished_identical(
        where, request, tmp_path, reference):
    shards, sums, alone = reference
    hosts = Hosts(where, request, tmp_path, reference, 0.004)
    ends = time.monotonic() + 60
    while "h0" not in hosts.holders():  # host 0 holds a claim on a shard not yet merged
        assert time.monotonic() < ends, "host 0 never held a claim"
        time.sleep(0.01)
    hosts.children[0].send_signal(signal.SIGKILL)
    found = results(hosts.children, tmp_path, range(1, HOSTS))
    assert all(result["sums"] == sums for result in found.values())
    assert all(result["complete"] for result in found.values())
    for k in range(1, HOSTS):
        same_shards(hosts.directory(k), alone)


def _owner(text: str | bytes) -> str | None:
    try:
        body = json.loads(text)
    except ValueError:
        return None
    return None if body["released"] else body["owner"].rsplit("/", 1)[1]


@pytest.fixture(scope="module")
def bucket():
    """moto's S3 server with a bucket; the environment that points boto3 at it."""
    server = MotoS3Server()
    try:
        server.client().create_bucket(Bucket="shared")
        yield {"AWS_ENDPOINT_URL_S3": server.endpoint, "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    finally:
        server.stop()


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


def _read(shards, cache, shared, batches_count: int = 10) -> list[int]:
    raw = mdc.RawShards(shards, ByteTokenizer, window=2, piece_size=4096, shared=shared)
    config = mdc.GPTDataConfig(random_seed=7, sequence_length=32, split="100,0,0", eod_id=256,
                               blend=([raw], None), path_to_cache=str(cache))
    try:
        train = mdc.build_datasets(config, [400, None, None])[0]
        sums = [int(batch["tokens"].sum()) for batch in batches(train, batches_count)]
        ends = time.monotonic() + 60
        while not train.corpus.complete() and time.monotonic() < ends:
            train.corpus._raise_error()
            time.sleep(0.02)
        return sums
    finally:
        raw_member.stop_raw_corpora()


def test_a_second_host_reads_what_the_first_published_in_a_shared_directory(tmp_path,
                                                                            reference):
    shards, sums, alone = reference
    assert _read(shards, tmp_path / "one", tmp_path / "shared") == sums
    calls = []
    original = ByteTokenizer.encode

    def counted(self, text):
        calls.append(text)
        return original(self, text)

    ByteTokenizer.encode = counted
    try:  # another cache, the same shared store: nothing is tokenized again
        assert _read(shards, tmp_path / "two", tmp_path / "shared") == sums
    finally:
        ByteTokenizer.encode = original
    assert calls == []
    same_shards(os.path.join(tmp_path, "two", "raw", os.path.basename(alone)), alone)


def test_a_piece_in_the_shared_store_unlike_its_manifest_is_refused(tmp_path, reference):
    shards, sums, alone = reference
    _read(shards, tmp_path / "one", tmp_path / "shared", 1)
    pieces = tmp_path / "shared" / os.path.basename(alone) / "pieces"
    victim = sorted(pieces.glob("*.bin"))[3]
    data = bytearray(victim.read_bytes())
    data[0] ^= 1
    victim.write_bytes(bytes(data))
    with pytest.raises(mdc.DataError, match=f"{victim.name}: .* its manifest says"):
        _read(shards, tmp_path / "two", tmp_path / "shared")
    left = os.listdir(os.path.join(tmp_path, "two", "raw", os.path.basename(alone), "pieces"))
    assert victim.name not in left and not any("fetch" in name for name in left)


def test_hosts_whose_shards_were_cut_differently_are_refused(tmp_path):
    shards = write_shards(tmp_path, counts=(60, 40), seed=1)
    _read(shards, tmp_path / "one", tmp_path / "shared", 1)
    write_shards(tmp_path, counts=(90, 40), seed=1)  # the first shard differs on host two
    with pytest.raises(mdc.DataError, match="plan.json: the shared store's pieces were cut"):
        _read(shards, tmp_path / "two", tmp_path / "shared", 1)


@pytest.mark.parametrize("shared, message", [
    (5, "shared 5 must be a URL or a directory"),
    ("", "shared '' must be a URL or a directory"),
    ("nosuch://bucket/run", "no shared store for nosuch://"),
])
def test_a_shared_store_that_is_none_is_refused(tmp_path, shared, message):
    shards = write_shards(tmp_path, counts=(20,), seed=1)
    with pytest.raises(mdc.DataError, match=message):
        _read(shards, tmp_path / "one", shared, 1)
