"""tools/preprocess_data.py, tools/merge_datasets.py and tools/make_demo_corpus.py, run as
programs; megatron-core reads what they write."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from preprocess_helpers import REPO, TEXTS, expected_sequences, read_documents

from megadata_core import DataError
from megadata_core.preprocess import ByteTokenizer, preprocess_jsonl


def run_tool(name, *args, check=True):
    result = subprocess.run(
        [sys.executable, str(REPO / "tools" / f"{name}.py"), *map(str, args)],
        capture_output=True, text=True, cwd=REPO, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},  # this checkout's code, not main's
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{name} failed ({result.returncode}):\n{result.stderr}")
    return result


def test_cli_plain_gz_zst_read_by_megatron(tmp_path, write_jsonl, megatron_indexed):
    groups = [TEXTS[:3], TEXTS[3:6], TEXTS[6:]]
    plain = write_jsonl("a_part.jsonl", [{"text": t} for t in groups[0]])
    gz = write_jsonl("b_part.jsonl.gz", [{"text": t} for t in groups[1]])
    zst = write_jsonl("c_part.jsonl.zst", [{"text": t} for t in groups[2]])
    out = tmp_path / "out"
    out.mkdir()
    result = run_tool(
        "preprocess_data", f"--input={plain},{gz}", f"--input={tmp_path}/c_*.jsonl.zst",
        f"--output_prefix={out}/corpus", "--append_eod", "--workers=2", "--partitions=2",
        "--keep_sequential_samples", "--log_interval=2",
    )
    assert "documents:   8" in result.stdout
    assert "bad lines:   0" in result.stdout
    assert re.search(r"processed \d+ documents \(", result.stderr)
    assert sorted(os.listdir(out)) == ["corpus_text_document.bin", "corpus_text_document.idx"]
    dataset = megatron_indexed.IndexedDataset(str(out / "corpus_text_document"))
    assert read_documents(None, dataset) == expected_sequences(TEXTS)
    assert zst.endswith(".zst")


def test_cli_zstd_open_binary_in_process(tmp_path, write_jsonl, load_tool):
    records = [{"text": t} for t in TEXTS] * 3
    zst = write_jsonl("in.jsonl.zst", records)
    tool = load_tool("preprocess_data")
    summary = preprocess_jsonl([zst], str(tmp_path / "o"), ByteTokenizer,
                               open_binary=tool.open_binary, partitions=2,
                               keep_sequential_samples=True)
    assert read_documents(summary.output_prefixes["text"]) == expected_sequences(TEXTS * 3, False)
    data = open(zst, "rb").read()
    for name, damaged in [("corrupt", data[:-7] + b"garbage"), ("truncated", data[:-5])]:
        broken = tmp_path / f"{name}.jsonl.zst"
        broken.write_bytes(damaged)
        with pytest.raises(DataError, match=rf"{name}\.jsonl\.zst: cannot read input: zstd"):
            preprocess_jsonl([str(broken)], str(tmp_path / "b"), ByteTokenizer,
                             open_binary=tool.open_binary)
    assert not any(name.startswith("b_") for name in os.listdir(tmp_path))
    two_frames = tmp_path / "frames.jsonl.zst"
    two_frames.write_bytes(data + data)
    summary = preprocess_jsonl([str(two_frames)], str(tmp_path / "f"), ByteTokenizer,
                               open_binary=tool.open_binary)
    assert summary.documents == 2 * len(records)


def test_cli_bad_line_fails_cleanly(tmp_path, write_jsonl):
    path = write_jsonl("in.jsonl", [{"text": "ok"}, {"text": ["not", "a", "string"]}])
    out = tmp_path / "out"
    out.mkdir()
    result = run_tool("preprocess_data", f"--input={path}", f"--output_prefix={out}/c",
                      check=False)
    assert result.returncode == 1
    assert "in.jsonl, line 2: key 'text' holds an array, not a string" in result.stderr
    assert os.listdir(out) == []
    skipped = run_tool("preprocess_data", f"--input={path}", f"--output_prefix={out}/c",
                       "--skip_bad_lines", "--json_keys=text")
    assert "bad lines:   1  (not_string=1)" in skipped.stdout


def test_merge_tool(tmp_path, write_jsonl, megatron_indexed):
    shards = tmp_path / "shards"
    shards.mkdir()
    texts = [f"document number {i}" for i in range(12)]
    for k in (0, 1, 2, 10):  # natural order: 10 comes last
        path = write_jsonl(f"p{k}.jsonl", [{"text": t} for t in texts[k % 9 : k % 9 + 3]])
        preprocess_jsonl([path], str(shards / f"part_{k}"), ByteTokenizer, append_eod=True)
    run_tool("merge_datasets", f"--input={shards}", f"--output_prefix={tmp_path}/merged")
    merged = megatron_indexed.IndexedDataset(str(tmp_path / "merged"))
    expected = texts[0:3] + texts[1:4] + texts[2:5] + texts[1:4]
    assert read_documents(None, merged) == expected_sequences(expected)
    listed = run_tool("merge_datasets", f"--input={shards}/part_2_text_document",
                      f"--input={shards}/part_0_text_document.idx",
                      f"--output_prefix={tmp_path}/two")
    assert "merged 2 corpora" in listed.stdout
    assert read_documents(str(tmp_path / "two")) == expected_sequences(texts[2:5] + texts[0:3])


def test_make_demo_corpus(tmp_path, load_tool):
    tool = load_tool("make_demo_corpus")
    output = tmp_path / "demo.jsonl"
    assert tool.build_demo_corpus(str(output), max_documents=25) == 25
    lines = output.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 25
    assert all(json.loads(line)["text"].strip() for line in lines)
    again = tmp_path / "again.jsonl"
    tool.build_demo_corpus(str(again), max_documents=25)
    assert again.read_bytes() == output.read_bytes()  # deterministic
    small = tmp_path / "small.jsonl"
    count = tool.build_demo_corpus(str(small), max_bytes=200_000, kind="docstrings")
    assert count > 0 and os.path.getsize(small) <= 200_000
    result = run_tool("make_demo_corpus", f"--output={tmp_path}/cli.jsonl", "--max_documents=3")
    assert "wrote 3 documents" in result.stdout
    assert len((tmp_path / "cli.jsonl").read_text(encoding="utf-8").splitlines()) == 3
