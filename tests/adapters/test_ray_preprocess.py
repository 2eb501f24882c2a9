"""The Ray engine on a real local cluster (127.0.0.1, 2 CPUs): the same corpus bytes as one
process, and a worker killed mid-task retried by Ray."""

from __future__ import annotations

import functools
import os
import pathlib
import sys

import pytest

ray = pytest.importorskip("ray")

PREPROCESS_TESTS = pathlib.Path(__file__).resolve().parents[1] / "preprocess"
sys.path.insert(0, str(PREPROCESS_TESTS))  # task_helpers, importable in workers too

from preprocess_helpers import files_of  # noqa: E402
from task_helpers import KillOnceTokenizer, texts, write_inputs  # noqa: E402

from megadata_adapters.engines.parquet_records import ParquetReader  # noqa: E402
from megadata_adapters.engines.ray_preprocess import ray_engine  # noqa: E402
from megadata_core.preprocess import ByteTokenizer, preprocess_jsonl, preprocess_tasks  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    """One local cluster for this module (its start costs seconds)."""
    paths = [str(PREPROCESS_TESTS), *(p for p in sys.path if p and os.path.isdir(p))]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(paths)}})
    yield
    ray.shutdown()


def test_ray_gives_the_single_process_bytes(cluster, tmp_path):
    paths = write_inputs(tmp_path, texts(40))
    reference = preprocess_jsonl([paths["jsonl"], paths["jsonl"]], str(tmp_path / "r"),
                                 ByteTokenizer, append_eod=True)
    summary = preprocess_tasks(
        [paths["jsonl"], paths["parquet"]], str(tmp_path / "o"), ByteTokenizer,
        append_eod=True, task_size=200, table_reader=ParquetReader(),
        engine=ray_engine(max_in_flight=3, progress=False),
    )
    assert files_of(summary.output_prefixes["text"]) == files_of(
        reference.output_prefixes["text"])
    assert sorted(os.listdir(tmp_path)) == [  # no work directory or temporaries left
        "in.jsonl", "in.jsonl.gz", "in.parquet", "o_text_document.bin", "o_text_document.idx",
        "r_text_document.bin", "r_text_document.idx"]


def test_worker_killed_mid_task_is_retried(cluster, tmp_path):
    paths = write_inputs(tmp_path, texts(30, {17: "KILL"}))
    marker = tmp_path / "killed"
    reference = preprocess_jsonl([paths["jsonl"]], str(tmp_path / "r"), ByteTokenizer,
                                 append_eod=True)
    summary = preprocess_tasks(
        [paths["jsonl"]], str(tmp_path / "o"), functools.partial(KillOnceTokenizer, str(marker)),
        append_eod=True, task_size=100, engine=ray_engine(max_retries=2, progress=False),
    )
    assert marker.exists()  # a worker did die in the middle of a task
    assert files_of(summary.output_prefixes["text"]) == files_of(
        reference.output_prefixes["text"])
    assert not os.path.exists(tmp_path / "o.work")


def test_ray_with_gigatoken_gives_the_reference_encoders_bytes(cluster, tmp_path):
    pytest.importorskip("gigatoken")
    import tokenizer_files

    from megadata_adapters.tokenizing.text_tokenizers import load_tokenizer

    hf = tokenizer_files.write_hf_directory(str(tmp_path))
    paths = write_inputs(tmp_path, texts(60, {5: "Zürich 東京 😀 \U0001fae8", 9: "<s> and </s>"}))
    factories = {encoder: functools.partial(load_tokenizer, "HuggingFaceTokenizer",
                                            tokenizer_model=hf, encoder=encoder)
                 for encoder in ("auto", "reference")}
    assert factories["auto"]().encoder.startswith("gigatoken")
    reference = preprocess_jsonl([paths["jsonl"]], str(tmp_path / "r"), factories["reference"],
                                 append_eod=True)
    summary = preprocess_tasks(
        [paths["jsonl"], paths["parquet"]], str(tmp_path / "o"), factories["auto"],
        append_eod=True, task_size=300, table_reader=ParquetReader(),
        engine=ray_engine(max_in_flight=3, progress=False),
    )
    twice = preprocess_jsonl([paths["jsonl"], paths["jsonl"]], str(tmp_path / "t"),
                             factories["reference"], append_eod=True)
    assert files_of(summary.output_prefixes["text"]) == files_of(twice.output_prefixes["text"])
    assert reference.documents * 2 == summary.documents


def test_ray_gives_megatrons_partition_order(cluster, tmp_path):
    paths = write_inputs(tmp_path, texts(40))
    reference = preprocess_jsonl([paths["jsonl"], paths["jsonl"]], str(tmp_path / "r"),
                                 ByteTokenizer, append_eod=True, partitions=3)
    summary = preprocess_tasks(
        [paths["jsonl"], paths["parquet"]], str(tmp_path / "o"), ByteTokenizer,
        append_eod=True, task_size=200, table_reader=ParquetReader(), partitions=3,
        engine=ray_engine(max_in_flight=3, progress=False),
    )
    assert files_of(summary.output_prefixes["text"]) == files_of(
        reference.output_prefixes["text"])


def test_ray_writes_the_single_process_conversation_corpus(cluster, tmp_path):
    pytest.importorskip("transformers")
    from chat_files import chat_factory, conversations, save_chat_tokenizer, write_rows

    directory = save_chat_tokenizer(str(tmp_path / "tok"))
    source = write_rows(tmp_path / "chat.jsonl", conversations(60))
    options = dict(json_keys=["messages"], append_eod=True)
    reference = preprocess_jsonl([source], str(tmp_path / "r"), chat_factory(directory),
                                 **options)
    summary = preprocess_tasks([source], str(tmp_path / "o"), chat_factory(directory),
                               task_size=1500, engine=ray_engine(progress=False), **options)
    for key in ("messages", "messages_roles"):
        assert files_of(summary.output_prefixes[key]) == files_of(
            reference.output_prefixes[key])
    assert not os.path.exists(tmp_path / "o.work")
