"""The task plan reads s3://, gs:// and http(s):// inputs from real stores on 127.0.0.1
and gives the same corpus bytes as from local files."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cloud_helpers import BUCKET

from megadata_adapters.engines.parquet_records import ParquetReader
from megadata_core import DataError
from megadata_core.preprocess import ByteTokenizer, local_engine, preprocess_tasks

TEXTS = [f"document {i} " + "é" * (i % 7) + "x" * (i % 13) for i in range(50)]


def _write_inputs(directory) -> dict[str, bytes]:
    """The same texts as .jsonl, .jsonl.gz and .parquet (row groups of 7): suffix -> bytes."""
    data = b"".join(json.dumps({"text": t}).encode() + b"\n" for t in TEXTS)
    parquet = directory / "in.parquet"
    pq.write_table(pa.table({"text": TEXTS}), parquet, row_group_size=7)
    return {"jsonl": data, "jsonl.gz": gzip.compress(data), "parquet": parquet.read_bytes()}


def _url(store, key: str) -> str:
    if store.kind == "http":
        return f"{store.active}/{key}"
    return f"{'s3' if store.kind == 's3' else 'gs'}://{BUCKET}/{key}"


def _upload(store, tmp_path, inputs: dict[str, bytes]) -> dict[str, str]:
    urls = {}
    for suffix, data in inputs.items():
        key = f"inputs/{tmp_path.name}/in.{suffix}"
        store.put(key, data)
        urls[suffix] = _url(store, key)
    return urls


def _local(tmp_path, inputs: dict[str, bytes]) -> dict[str, str]:
    paths = {}
    for suffix, data in inputs.items():
        path = tmp_path / f"local.{suffix}"
        path.write_bytes(data)
        paths[suffix] = str(path)
    return paths


def _corpus(prefix: str) -> tuple[bytes, bytes]:
    with open(f"{prefix}.bin", "rb") as bin_file, open(f"{prefix}.idx", "rb") as idx_file:
        return bin_file.read(), idx_file.read()


def _run(inputs, prefix, **options):
    options = {"append_eod": True, "table_reader": ParquetReader(), **options}
    return preprocess_tasks(inputs, str(prefix), ByteTokenizer, **options)


def test_remote_inputs_give_the_local_corpus(store, tmp_path):
    inputs = _write_inputs(tmp_path)
    order = ["jsonl", "jsonl.gz", "parquet", "jsonl"]
    local = _local(tmp_path, inputs)
    expected = _corpus(
        _run([local[s] for s in order], tmp_path / "local").output_prefixes["text"]
    )
    urls = _upload(store, tmp_path, inputs)
    for task_size, workers in ((100, 2), (10**9, 1)):  # many ranged cuts .. whole objects
        summary = _run([urls[s] for s in order], tmp_path / f"remote{task_size}",
                       task_size=task_size, engine=local_engine(workers))
        assert _corpus(summary.output_prefixes["text"]) == expected, task_size
        assert summary.documents == 4 * len(TEXTS)


def test_a_replaced_object_changes_the_plan(store, tmp_path):
    inputs = _write_inputs(tmp_path)
    urls = _upload(store, tmp_path, {"jsonl": inputs["jsonl"]})
    prefix = tmp_path / "out"
    _run([urls["jsonl"]], prefix, task_size=200, keep_shards=True)
    with open(f"{prefix}.work/plan.json", encoding="utf-8") as stream:
        (url, size, generation), = json.load(stream)["command"]["inputs"]
    assert (url, size) == (urls["jsonl"], len(inputs["jsonl"])) and generation
    _run([urls["jsonl"]], prefix, task_size=200, keep_shards=True)  # same object: resumes
    store.put(f"inputs/{tmp_path.name}/in.jsonl", inputs["jsonl"].replace(b"document", b"Document"))
    with pytest.raises(DataError, match="work directory of a different command.*inputs"):
        _run([urls["jsonl"]], prefix, task_size=200, keep_shards=True)


def test_a_missing_object_is_a_data_error_naming_it(store, tmp_path):
    url = _url(store, f"inputs/{tmp_path.name}/absent.jsonl")
    with pytest.raises(DataError, match=f"{url}: .*not found"):
        _run([url], tmp_path / "out", task_size=100)
