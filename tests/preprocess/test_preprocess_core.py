"""megadata_core.preprocess: tokenizing JSON lines into .bin/.idx corpora."""

from __future__ import annotations

import multiprocessing
import os
import pickle

import numpy as np
import pytest
from preprocess_helpers import TEXTS, expected_sequences, files_of, read_documents

from megadata_core import DataError, IndexedDataset
from megadata_core.preprocess import (
    BadLineError,
    ByteTokenizer,
    count_lines,
    parse_record,
    preprocess_jsonl,
    tokenize_chunk,
)


def test_byte_tokenizer_round_trip():
    tokenizer = ByteTokenizer()
    text = "héllo 東京 😀\n"
    ids = tokenizer.encode(text)
    assert ids.dtype == np.uint8
    assert ids.tolist() == list(text.encode("utf-8"))
    assert tokenizer.decode(np.append(ids, tokenizer.eod_id)) == text
    assert (tokenizer.vocab_size, tokenizer.eod_id) == (257, 256)
    assert tokenizer.encode("").size == 0
    assert isinstance(pickle.loads(pickle.dumps(tokenizer)), ByteTokenizer)


def test_basic_output_and_naming(tmp_path, write_jsonl):
    path = write_jsonl("in.jsonl", [{"text": t} for t in TEXTS])
    summary = preprocess_jsonl([path], str(tmp_path / "out"), ByteTokenizer, append_eod=True)
    prefix = str(tmp_path / "out_text_document")
    assert summary.output_prefixes == {"text": prefix}
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl", "out_text_document.bin",
                                            "out_text_document.idx"]
    assert read_documents(prefix) == expected_sequences(TEXTS)
    assert IndexedDataset(prefix).dtype == np.uint16
    assert summary.documents == len(TEXTS)
    assert summary.tokens == sum(len(t.encode()) + 1 for t in TEXTS if t)
    assert summary.bytes == os.path.getsize(path)
    assert summary.bad_lines == 0


def test_without_eod(tmp_path, write_jsonl):
    path = write_jsonl("in.jsonl", [{"text": t} for t in TEXTS])
    preprocess_jsonl([path], str(tmp_path / "o"), ByteTokenizer, append_eod=False)
    assert read_documents(str(tmp_path / "o_text_document")) == expected_sequences(TEXTS, False)


def test_empty_text_gives_document_without_sequences(tmp_path, write_jsonl):
    path = write_jsonl("in.jsonl", [{"text": "ab"}, {"text": ""}, {"text": "c"}])
    preprocess_jsonl([path], str(tmp_path / "o"), ByteTokenizer, append_eod=True)
    dataset = IndexedDataset(str(tmp_path / "o_text_document"))
    assert dataset.document_indices.tolist() == [0, 1, 1, 2]
    assert dataset.sequence_lengths.tolist() == [3, 2]


def _corpus(count=60):
    rng = np.random.default_rng(7)
    words = ["alpha", "beta", "γάμμα", "δ", "épsilon", "zeta", "東", ""]
    return [{"text": " ".join(rng.choice(words, size=int(rng.integers(0, 12))))}
            for _ in range(count)]


@pytest.mark.parametrize("workers", [2, 3])
def test_output_identical_for_any_worker_count(tmp_path, write_jsonl, workers):
    path = write_jsonl("in.jsonl", _corpus())
    one = preprocess_jsonl([path], str(tmp_path / "one"), ByteTokenizer, append_eod=True,
                           workers=1, chunk_lines=5)
    many = preprocess_jsonl([path], str(tmp_path / "many"), ByteTokenizer, append_eod=True,
                            workers=workers, chunk_lines=3)
    assert files_of(one.output_prefixes["text"]) == files_of(many.output_prefixes["text"])
    assert one.documents == many.documents == 60


@pytest.mark.parametrize("partitions,lines", [(3, 60), (4, 2), (2, 1)])
def test_partitions_merge_to_identical_bytes(tmp_path, write_jsonl, partitions, lines):
    path = write_jsonl("in.jsonl", _corpus(lines))
    single = preprocess_jsonl([path], str(tmp_path / "single"), ByteTokenizer, append_eod=True)
    os.mkdir(tmp_path / "parts")
    sharded = preprocess_jsonl([path], str(tmp_path / "parts" / "o"), ByteTokenizer,
                               append_eod=True, partitions=partitions, workers=2, chunk_lines=4,
                               keep_sequential_samples=True)
    assert files_of(single.output_prefixes["text"]) == files_of(sharded.output_prefixes["text"])
    assert sorted(os.listdir(tmp_path / "parts")) == ["o_text_document.bin", "o_text_document.idx"]
    assert sharded.partition_prefixes == {"text": []}


def test_keep_partitions_are_contiguous_shards(tmp_path, write_jsonl):
    records = _corpus(10)
    path = write_jsonl("in.jsonl", records)
    summary = preprocess_jsonl([path], str(tmp_path / "o"), ByteTokenizer, append_eod=True,
                               partitions=3, keep_partitions=True, keep_sequential_samples=True)
    shards = summary.partition_prefixes["text"]
    assert shards == [str(tmp_path / f"o_{k}_text_document") for k in range(3)]
    pieces = [read_documents(shard) for shard in shards]
    assert [len(p) for p in pieces] == [4, 4, 2]  # Megatron: ceil(10 / 3) lines a shard
    assert sum(pieces, []) == expected_sequences([r["text"] for r in records])
    assert sum(pieces, []) == read_documents(summary.output_prefixes["text"])


def test_gzip_input_and_multiple_files_and_keys(tmp_path, write_jsonl):
    first = [{"text": f"doc {i}", "title": f"T{i}", "extra": i} for i in range(5)]
    second = [{"title": "", "text": "é" * i} for i in range(4)]
    paths = [write_jsonl("a.jsonl.gz", first), write_jsonl("b.jsonl", second)]
    summary = preprocess_jsonl(paths, str(tmp_path / "o"), ByteTokenizer,
                               json_keys=["text", "title"], append_eod=True, workers=2)
    assert summary.documents == 9
    records = first + second
    for key in ("text", "title"):
        prefix = str(tmp_path / f"o_{key}_document")
        assert summary.output_prefixes[key] == prefix
        assert read_documents(prefix) == expected_sequences([r[key] for r in records])
    assert summary.tokens == sum(summary.tokens_per_key.values())


def test_blank_lines_and_bom_are_skipped(tmp_path, write_jsonl):
    path = write_jsonl("in.jsonl", [b'\xef\xbb\xbf{"text": "x"}\n', b"\n", b"   \t\r\n",
                                    b'{"text": "y"}\r\n', b'{"text": "z"}'])
    summary = preprocess_jsonl([path], str(tmp_path / "o"), ByteTokenizer)
    assert (summary.documents, summary.blank_lines, summary.bad_lines) == (3, 2, 0)
    assert read_documents(str(tmp_path / "o_text_document")) == expected_sequences("xyz", False)


BAD_LINES = {
    "invalid_json": b'{"text": "unterminated\n',
    "missing_key": b'{"body": "no text key"}\n',
    "not_string": b'{"text": 42}\n',
    "invalid_utf8": b'{"text": "bad \xff byte"}\n',
    "not_object": b'["a", "list"]\n',
    "lone_surrogate": b'{"text": "\\ud800"}\n',
}


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
@pytest.mark.parametrize("workers,partitions", [(1, 1), (2, 2)])
def test_bad_line_raises_and_leaves_no_files(tmp_path, write_jsonl, kind, workers, partitions):
    good = {"text": "fine"}
    records = [good] * 30 + [b"\n", BAD_LINES[kind]] + [good] * 3  # bad line is line 32
    path = write_jsonl("in.jsonl", records)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(DataError, match=r"in\.jsonl, line 32\b") as caught:
        preprocess_jsonl([path], str(out / "o"), ByteTokenizer, append_eod=True,
                         workers=workers, partitions=partitions, chunk_lines=4,
                         json_keys=["text"])
    assert path in str(caught.value)
    assert os.listdir(out) == []


def test_skip_bad_lines_counts_each_kind(tmp_path, write_jsonl):
    records = [{"text": "a"}]
    for line in BAD_LINES.values():
        records += [line, {"text": "b"}]
    path = write_jsonl("in.jsonl", records)
    summary = preprocess_jsonl([path], str(tmp_path / "o"), ByteTokenizer, append_eod=True,
                               skip_bad_lines=True, workers=2, chunk_lines=2)
    assert summary.bad_lines == len(BAD_LINES)
    assert summary.bad_line_kinds == {"invalid_json": 1, "missing_key": 1, "not_string": 1,
                                      "invalid_utf8": 2, "not_object": 1}
    assert summary.documents == 1 + len(BAD_LINES)
    assert len(summary.bad_line_examples) == len(BAD_LINES)
    assert all("in.jsonl, line " in message for message in summary.bad_line_examples)
    expected = expected_sequences(["a"] + ["b"] * len(BAD_LINES))
    assert read_documents(str(tmp_path / "o_text_document")) == expected


def test_bad_line_in_second_key_drops_whole_document(tmp_path, write_jsonl):
    path = write_jsonl("in.jsonl", [{"text": "a", "t": "x"}, {"text": "b", "t": 1},
                                    {"text": "c", "t": "z"}])
    summary = preprocess_jsonl([path], str(tmp_path / "o"), ByteTokenizer, json_keys=["text", "t"],
                               skip_bad_lines=True)
    assert summary.documents == 2
    assert read_documents(summary.output_prefixes["text"]) == expected_sequences("ac", False)
    assert read_documents(summary.output_prefixes["t"]) == expected_sequences("xz", False)


def test_parse_record_messages():
    with pytest.raises(BadLineError, match=r"f\.jsonl, line 7: missing key 'text'") as caught:
        parse_record(b'{"a": 1}', ["text"], "f.jsonl", 7)
    assert caught.value.kind == "missing_key"
    copy = pickle.loads(pickle.dumps(caught.value))  # crosses the pool intact
    assert (type(copy), str(copy), copy.kind) == (BadLineError, str(caught.value), "missing_key")
    with pytest.raises(DataError, match="holds null, not a string"):
        parse_record(b'{"text": null}', ["text"], "f.jsonl", 1)
    assert parse_record('{"text": "é", "k": "v"}'.encode(), ["k", "text"], "f", 1) == ["v", "é"]


def test_tokenize_chunk_shapes():
    lines = [b'{"text": "ab"}\n', b"\n", b'{"text": ""}\n', b'{"text": "c"}\n']
    chunk = tokenize_chunk(lines, ByteTokenizer(), ["text"], append_eod=True, dtype=np.uint16)
    assert chunk.documents == 3 and chunk.blank_lines == 1
    assert chunk.tokens["text"].dtype == np.uint16
    assert chunk.tokens["text"].tolist() == [97, 98, 256, 99, 256]
    assert chunk.lengths["text"].tolist() == [3, 0, 2]


class _WideTokenizer:
    """Claims a small vocabulary but returns a large id: must be caught."""

    vocab_size = 100
    eod_id = 99

    def encode(self, text):
        return [1, 70000]


def test_token_id_outside_dtype_is_an_error(tmp_path, write_jsonl):
    path = write_jsonl("in.jsonl", [{"text": "x"}])
    with pytest.raises(DataError, match="70000"):
        preprocess_jsonl([path], str(tmp_path / "o"), _WideTokenizer)
    assert os.listdir(tmp_path) == ["in.jsonl"]


def test_input_errors(tmp_path, write_jsonl):
    with pytest.raises(DataError, match="not found"):
        preprocess_jsonl([str(tmp_path / "missing.jsonl")], str(tmp_path / "o"), ByteTokenizer)
    zst = write_jsonl("in.jsonl.zst", [{"text": "x"}])
    with pytest.raises(DataError, match="zstd"):
        preprocess_jsonl([zst], str(tmp_path / "o"), ByteTokenizer)
    plain = write_jsonl("in.jsonl", [{"text": "x"}])
    with pytest.raises(DataError, match="does not exist"):
        preprocess_jsonl([plain], str(tmp_path / "nodir" / "o"), ByteTokenizer)
    with pytest.raises(DataError, match="workers"):
        preprocess_jsonl([plain], str(tmp_path / "o"), ByteTokenizer, workers=0)
    truncated = tmp_path / "cut.jsonl.gz"
    truncated.write_bytes((tmp_path / "in.jsonl").read_bytes())  # not gzip at all
    with pytest.raises(DataError, match="cut.jsonl.gz"):
        preprocess_jsonl([str(truncated)], str(tmp_path / "o"), ByteTokenizer)
    assert sorted(os.listdir(tmp_path)) == ["cut.jsonl.gz", "in.jsonl", "in.jsonl.zst"]


def test_progress_reports_running_totals(tmp_path, write_jsonl):
    path = write_jsonl("in.jsonl", _corpus(20))
    seen = []
    summary = preprocess_jsonl([path], str(tmp_path / "o"), ByteTokenizer, chunk_lines=6,
                               progress=lambda docs, nbytes: seen.append((docs, nbytes)))
    assert len(seen) == 4
    assert seen == sorted(seen)
    assert seen[-1] == (summary.documents, summary.bytes) == (20, os.path.getsize(path))


def test_count_lines(tmp_path):
    for data, lines in [(b"", 0), (b"a", 1), (b"a\n", 1), (b"a\nb", 2), (b"\n\n", 2)]:
        path = tmp_path / "f.jsonl"
        path.write_bytes(data)
        assert count_lines(str(path)) == lines


def test_factory_must_return_a_tokenizer(tmp_path, write_jsonl):
    path = write_jsonl("in.jsonl", [{"text": "x"}])
    with pytest.raises(DataError, match="lacks encode, eod_id or vocab_size"):
        preprocess_jsonl([path], str(tmp_path / "o"), dict)


def _fails_in_workers():
    if multiprocessing.parent_process() is not None:
        raise RuntimeError("tokenizer files are missing on this worker")
    return ByteTokenizer()


def test_worker_factory_failure_is_reported(tmp_path, write_jsonl):
    """A factory failing inside the pool is raised, not retried forever, and cleaned up."""
    path = write_jsonl("in.jsonl", [{"text": "x"}] * 5)
    with pytest.raises(RuntimeError, match="missing on this worker"):
        preprocess_jsonl([path], str(tmp_path / "o"), _fails_in_workers, workers=2)
    assert os.listdir(tmp_path) == ["in.jsonl"]
