"""The task plan: same corpus bytes for any task size, worker count and input format;
resumable after kill -9; manifests verified; bad inputs and foreign work dirs refused."""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest
from preprocess_helpers import REPO, files_of
from task_helpers import StallOnceTokenizer, texts, write_inputs

from megadata_adapters.engines.parquet_records import ParquetReader
from megadata_core import DataError, IndexedDataset
from megadata_core.datasets.config import read_data_args
from megadata_core.preprocess import ByteTokenizer, local_engine, preprocess_jsonl, preprocess_tasks

HERE = pathlib.Path(__file__).resolve().parent  # task_helpers; preprocess_helpers in tests/helpers
HELPERS = os.pathsep.join([str(HERE), str(HERE.parent / "helpers")])


def _reference(tmp_path, paths) -> dict:
    """The single-process corpus of the jsonl inputs."""
    out = tmp_path / "reference"
    out.mkdir(exist_ok=True)
    summary = preprocess_jsonl(paths, str(out / "r"), ByteTokenizer, append_eod=True)
    return files_of(summary.output_prefixes["text"])


def _tasks(paths, prefix, **options):
    options = {"append_eod": True, "table_reader": ParquetReader(), **options}
    return preprocess_tasks(paths, str(prefix), ByteTokenizer, **options)


@pytest.mark.parametrize("workers", [1, 2])
def test_same_bytes_for_every_task_size_worker_count_and_format(tmp_path, workers):
    paths = write_inputs(tmp_path, texts(40))
    expected = _reference(tmp_path, [paths["jsonl"], paths["jsonl.gz"], paths["jsonl"]])
    for task_size in (1, 150, 10**9):  # a task per line .. whole files
        prefix = tmp_path / f"t{task_size}"
        summary = _tasks([paths["jsonl"], paths["jsonl.gz"], paths["parquet"]], prefix,
                         task_size=task_size, engine=local_engine(workers))
        assert files_of(summary.output_prefixes["text"]) == expected, task_size
        assert summary.documents == 120
        assert not os.path.exists(f"{prefix}.work")  # removed after the merge


@pytest.mark.parametrize("sequential", [False, True])
def test_partitions_give_megatrons_bytes_for_every_task_size_and_worker_count(tmp_path,
                                                                             sequential):
    """--partitions on the plan: each task writes a shard per partition, merged in
    (partition, task) order, so the one-task run's bytes (Megatron's order,
    test_preprocess_megatron) stand for any task size, worker count and format; resumed
    from the shards of an earlier run too."""
    paths = write_inputs(tmp_path, texts(40))
    inputs = [paths["jsonl"], paths["jsonl.gz"], paths["parquet"]]
    options = {"partitions": 3, "keep_sequential_samples": sequential, "keep_partitions": True}
    one = _tasks(inputs, tmp_path / "one", **options)
    expected = [files_of(p) for p in [one.output_prefixes["text"], *one.partition_prefixes["text"]]]
    for task_size, workers in [(1, 1), (150, 2), (1, 3)]:
        prefix = tmp_path / f"t{task_size}w{workers}"
        summary = _tasks(inputs, prefix, task_size=task_size, engine=local_engine(workers),
                         **options)
        got = [summary.output_prefixes["text"], *summary.partition_prefixes["text"]]
        assert [files_of(p) for p in got] == expected, (task_size, workers)
    # a rerun over kept shards skips every task and merges the same bytes
    _tasks(inputs, tmp_path / "kept", task_size=150, keep_shards=True, **options)
    again = _tasks(inputs, tmp_path / "kept", task_size=150, keep_shards=True, **options)
    assert files_of(again.output_prefixes["text"]) == expected[0]


def test_an_input_named_twice_is_two_sets_of_tasks(tmp_path):
    paths = write_inputs(tmp_path, texts(12))
    expected = _reference(tmp_path, [paths["jsonl"], paths["jsonl"]])
    for engine in (local_engine(1), local_engine(2)):
        prefix = tmp_path / f"twice{id(engine)}"
        summary = _tasks([paths["jsonl"], paths["jsonl"]], prefix, task_size=10**9,
                         engine=engine)
        assert files_of(summary.output_prefixes["text"]) == expected
        assert summary.documents == 24


_KILLED_RUN = """
import functools, sys
from task_helpers import StallOnceTokenizer
from megadata_core.preprocess import preprocess_tasks
preprocess_tasks([sys.argv[1]], sys.argv[2], functools.partial(StallOnceTokenizer, sys.argv[3]),
                 append_eod=True, task_size=1, keep_shards=True)
"""


def test_driver_killed_mid_run_then_rerun_gives_same_bytes(tmp_path):
    paths = write_inputs(tmp_path, texts(12, {8: "STALL"}))
    marker = tmp_path / "marker"
    expected = _reference(tmp_path, [paths["jsonl"]])
    out = tmp_path / "out"
    out.mkdir()
    prefix = out / "o"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), HELPERS])}
    process = subprocess.Popen(
        [sys.executable, "-c", _KILLED_RUN, paths["jsonl"], str(prefix), str(marker)],
        cwd=REPO, env=env, start_new_session=True, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 120  # a watchdog against a hang, not a timing check
        while not marker.exists():
            assert process.poll() is None, process.stderr.read()
            assert time.monotonic() < deadline, "the run never stalled"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        process.stderr.close()
    assert os.listdir(out) == ["o.work"]  # nothing under a corpus name
    work = out / "o.work"
    done = sorted(p.name for p in work.glob("task*.json"))
    assert done == [f"task{i:06d}.json" for i in range(8)]
    assert any(name.endswith(".tmp") for name in os.listdir(work))  # task 8's partial shard
    first = (work / "task000000.json").stat().st_mtime_ns
    summary = preprocess_tasks([paths["jsonl"]], str(prefix),
                               functools.partial(StallOnceTokenizer, str(marker)),
                               append_eod=True, task_size=1, keep_shards=True)
    assert files_of(summary.output_prefixes["text"]) == expected
    assert (work / "task000000.json").stat().st_mtime_ns == first  # skipped, not redone
    assert not [name for name in os.listdir(work) if name.endswith(".tmp")]
    assert sorted(os.listdir(out)) == ["o.work", "o_text_document.bin", "o_text_document.idx"]


def test_a_dead_drivers_claimed_task_is_taken_over_by_the_next(tmp_path):
    paths = write_inputs(tmp_path, texts(6, {3: "STALL"}))
    marker = tmp_path / "marker"
    expected = _reference(tmp_path, [paths["jsonl"]])
    prefix = tmp_path / "o"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), HELPERS])}
    env.pop("MEGADATA_HOST_ID", None)
    first = subprocess.Popen(
        [sys.executable, "-c", _KILLED_RUN, paths["jsonl"], str(prefix), str(marker)],
        cwd=REPO, env=env, start_new_session=True, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 120  # a watchdog against a hang, not a timing check
        while not marker.exists():
            assert first.poll() is None, first.stderr.read()
            assert time.monotonic() < deadline, "the first driver never stalled"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        first.stderr.close()
    claims = pathlib.Path(f"{prefix}.work/claims")
    assert any(f"{first.pid}@" in path.read_text() for path in claims.iterdir())
    # its claim is free at once on its own host (its process is gone): no lease waited
    summary = preprocess_tasks([paths["jsonl"]], str(prefix),
                               functools.partial(StallOnceTokenizer, str(marker)),
                               append_eod=True, task_size=1, keep_shards=True)
    assert files_of(summary.output_prefixes["text"]) == expected
    assert not pathlib.Path(f"{prefix}.work/driver.lock").exists()


def test_manifest_that_does_not_verify_is_rebuilt(tmp_path):
    paths = write_inputs(tmp_path, texts(10))
    expected = _reference(tmp_path, [paths["jsonl"]])
    prefix = tmp_path / "o"
    _tasks([paths["jsonl"]], prefix, task_size=100, keep_shards=True)
    work = pathlib.Path(f"{prefix}.work")
    shard = work / "task000001_text_document.bin"
    damaged = bytearray(shard.read_bytes())
    damaged[3] ^= 0xFF
    shard.write_bytes(bytes(damaged))  # same size, other bytes: only the sha256 tells
    manifest = json.loads((work / "task000002.json").read_text())
    manifest["fingerprint"] = "0" * 64
    (work / "task000002.json").write_text(json.dumps(manifest))
    os.remove(work / "task000003.json")  # shards without a manifest: a task never finished
    for suffix in (".bin", ".idx"):
        os.remove(f"{prefix}_text_document{suffix}")
    summary = _tasks([paths["jsonl"]], prefix, task_size=100, keep_shards=True)
    assert files_of(summary.output_prefixes["text"]) == expected
    assert shard.read_bytes() != bytes(damaged)


def test_work_directory_of_another_command_is_refused(tmp_path):
    paths = write_inputs(tmp_path, texts(10))
    prefix = tmp_path / "o"
    summary = _tasks([paths["jsonl"]], prefix, task_size=100, merge=False)
    with pytest.raises(DataError, match=r"o\.work: work directory of a different command.*"
                                        r"append_eod: True there, False now"):
        _tasks([paths["jsonl"]], prefix, task_size=100, append_eod=False)
    with pytest.raises(DataError, match=r"task_size: 100 there, 50 now"):
        _tasks([paths["jsonl"]], prefix, task_size=50)
    # --no_merge: the shards and a data-args file of 'tokens prefix' pairs
    items = read_data_args(f"{prefix}_text_document.data_args")
    weights, prefixes = items[0::2], items[1::2]
    assert prefixes == summary.partition_prefixes["text"]
    expected = [IndexedDataset(p).sequence_lengths.sum() for p in prefixes]
    assert [int(w) for w in weights] == expected
    assert not os.path.exists(f"{prefix}_text_document.bin")


def test_bad_inputs_are_data_errors_naming_the_file(tmp_path):
    paths = write_inputs(tmp_path, texts(30))
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"PAR1" + b"\0" * 64 + b"PAR1")
    with pytest.raises(DataError, match=r"corrupt\.parquet: not a readable parquet file"):
        _tasks([str(corrupt)], tmp_path / "a", task_size=100)
    with pytest.raises(DataError, match=r"in\.parquet: missing column\(s\) \['body'\].*text, n"):
        _tasks([paths["parquet"]], tmp_path / "b", task_size=100, json_keys=["body"])
    data = pathlib.Path(paths["jsonl.gz"]).read_bytes()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[: len(data) - 20])  # the member's end (and CRC) missing
    with pytest.raises(DataError, match=r"cut\.jsonl\.gz: cannot read input"):
        _tasks([str(cut)], tmp_path / "c", task_size=100)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"text": "a"}\n' * 30 + b"{oops\n")
    with pytest.raises(DataError, match=r"bad\.jsonl, line 31: invalid JSON"):
        _tasks([str(bad)], tmp_path / "d", task_size=100)  # the file's line, not the task's
    leftovers = [name for name in os.listdir(tmp_path) if name.endswith((".bin", ".idx"))]
    assert leftovers == []


def test_skipped_bad_lines_are_named_by_the_files_line_numbers(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes((b'{"text": "a"}\n' * 20 + b"{oops\n") * 3)  # lines 21, 42, 63
    for engine in (local_engine(1), local_engine(2)):
        summary = _tasks([str(bad)], tmp_path / f"s{id(engine)}", task_size=90,
                         skip_bad_lines=True, engine=engine)
        assert summary.bad_lines == 3 and summary.documents == 60
        numbers = [re.search(r"bad\.jsonl, line (\d+):", e)[1] for e in summary.bad_line_examples]
        assert numbers == ["21", "42", "63"]


def test_gzip_inputs_are_whole_file_tasks(tmp_path):
    paths = write_inputs(tmp_path, texts(5))
    with gzip.open(paths["jsonl.gz"]) as stream:
        assert len(stream.read().splitlines()) == 5
    from megadata_core.preprocess import plan_tasks

    tasks = plan_tasks([paths["jsonl.gz"], paths["jsonl"]], 40,
                       table_reader=ParquetReader())
    assert tasks[0].as_list() == [paths["jsonl.gz"], "lines", 0, -1]
    size = os.path.getsize(paths["jsonl"])
    with open(paths["jsonl"], "rb") as stream:
        data = stream.read()
    bounds = [t.start for t in tasks[1:]] + [size]
    assert all(data[b - 1:b] == b"\n" for b in bounds[1:])  # every cut on a line end
    assert len(tasks) - 1 == len(set(bounds)) - 1 < 5 + 1


def test_tool_task_plan_matches_its_default_run(tmp_path):
    paths = write_inputs(tmp_path, texts(25))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    common = [sys.executable, str(REPO / "tools" / "preprocess_data.py"), "--input",
              f"{paths['jsonl']},{paths['parquet']}", "--append_eod", "--noprogress"]
    planned = subprocess.run(
        [*common, "--output_prefix", str(tmp_path / "p"), "--task_size", "0.0002",
         "--workers", "2"], capture_output=True, text=True, env=env, timeout=120)
    assert planned.returncode == 0, planned.stderr
    assert "documents:   50" in planned.stdout
    reference = preprocess_jsonl([paths["jsonl"], paths["jsonl"]], str(tmp_path / "r"),
                                 ByteTokenizer, append_eod=True)
    assert files_of(str(tmp_path / "p_text_document")) == files_of(
        reference.output_prefixes["text"])
    # --partitions is a spelling of the plan: Megatron's round-robin order for any task size
    partitioned = subprocess.run(
        [*common, "--output_prefix", str(tmp_path / "q"), "--task_size", "0.0002",
         "--partitions", "3", "--workers", "2"], capture_output=True, text=True, env=env,
        timeout=120)
    assert partitioned.returncode == 0, partitioned.stderr
    reference = preprocess_jsonl([paths["jsonl"], paths["jsonl"]], str(tmp_path / "s"),
                                 ByteTokenizer, append_eod=True, partitions=3)
    assert files_of(str(tmp_path / "q_text_document")) == files_of(
        reference.output_prefixes["text"])
    refused = subprocess.run(
        [*common, "--output_prefix", str(tmp_path / "u"), "--task_size", "1", "--no_merge",
         "--partitions", "2"], capture_output=True, text=True, env=env, timeout=120)
    assert refused.returncode != 0 and "partitions: 2 orders the merged corpus" in refused.stderr


@pytest.mark.parametrize("mode", [["--workers", "1"], ["--workers", "2"],
                                  ["--workers", "2", "--partitions", "2"]])
def test_tool_reads_parquet_without_the_task_plan(tmp_path, mode):
    """`--input x.parquet` in the default pipeline (rows as documents, pyarrow on the system
    allocator) writes what the .jsonl of the same texts gives, in each mode."""
    paths = write_inputs(tmp_path, texts(25))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for name in ("parquet", "jsonl"):
        result = subprocess.run(
            [sys.executable, str(REPO / "tools" / "preprocess_data.py"), "--input",
             paths[name], "--output_prefix", str(tmp_path / name), "--append_eod",
             "--noprogress", *mode], capture_output=True, text=True, env=env, timeout=120)
        assert result.returncode == 0, result.stderr
        assert "documents:   25" in result.stdout
    assert files_of(str(tmp_path / "parquet_text_document")) == files_of(
        str(tmp_path / "jsonl_text_document"))


def test_tool_no_merge_reports_the_data_args_it_wrote(tmp_path):
    paths = write_inputs(tmp_path, texts(9))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    prefix = tmp_path / "n"
    result = subprocess.run(
        [sys.executable, str(REPO / "tools" / "preprocess_data.py"), "--input", paths["jsonl"],
         "--output_prefix", str(prefix), "--task_size", "0.0001", "--no_merge", "--noprogress"],
        capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    data_args = f"{prefix}_text_document.data_args"
    assert f"data_args[text]: {data_args} (4 shards" in result.stdout
    assert ".bin / .idx" not in result.stdout
    assert len(read_data_args(data_args)) == 8  # weight, prefix of 4 shards
