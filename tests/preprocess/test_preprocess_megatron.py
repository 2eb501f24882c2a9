"""preprocess_jsonl as Megatron-LM's preprocess_data.py: partitions, sentences, batch encoding."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import tokenizer_files as files
from preprocess_helpers import files_of, read_documents

from megadata_adapters.tokenizing.sentence_splitters import SentencexSplitter
from megadata_adapters.tokenizing.text_tokenizers import load_tokenizer
from megadata_core.preprocess import ByteTokenizer, preprocess_jsonl, tokenize_chunk


def _texts(n):
    return [f"Line {i} says hello. Then {'é' * (i % 4)} more!" if i % 5 else "" for i in range(n)]


@pytest.mark.parametrize("partitions, lines, workers", [(3, 10, 1), (2, 7, 2), (4, 2, 1)])
def test_partitions_are_round_robin_like_megatron(tmp_path, write_jsonl, partitions, lines,
                                                  workers):
    texts = _texts(lines)
    path = write_jsonl("in.jsonl", [{"text": t} for t in texts])
    summary = preprocess_jsonl([path], str(tmp_path / "o"), ByteTokenizer, append_eod=True,
                               partitions=partitions, keep_partitions=True, workers=workers,
                               chunk_lines=3)
    # Megatron writes line i to partition i % K and merges the partitions in order
    order = [i for k in range(partitions) for i in range(k, lines, partitions)]
    expected = [[list(texts[i].encode()) + [256]] if texts[i] else [] for i in order]
    assert read_documents(summary.output_prefixes["text"]) == expected
    shards = [read_documents(p) for p in summary.partition_prefixes["text"]]
    assert [len(s) for s in shards] == [len(range(k, lines, partitions))
                                        for k in range(partitions)]


def test_round_robin_counts_lines_over_all_inputs(tmp_path, write_jsonl):
    first = write_jsonl("a.jsonl", [{"text": "a0"}, {"text": "a1"}, {"text": "a2"}])
    second = write_jsonl("b.jsonl", [{"text": "b0"}, {"text": "b1"}])
    summary = preprocess_jsonl([first, second], str(tmp_path / "o"), ByteTokenizer,
                               partitions=2)
    texts = ["".join(map(chr, d[0])) for d in read_documents(summary.output_prefixes["text"])]
    assert texts == ["a0", "a2", "b1", "a1", "b0"]


@pytest.fixture(scope="module")
def gpt2_files(tmp_path_factory):
    return files.write_gpt2_files(str(tmp_path_factory.mktemp("gpt2")))


class EncodeOnly:
    """A tokenizer seen through ``encode`` alone (no batch encoder)."""

    def __init__(self, tokenizer):
        self.inner, self.eod_id, self.vocab_size = tokenizer, tokenizer.eod_id, tokenizer.vocab_size

    def encode(self, text):
        return self.inner.encode(text)


def test_batch_encoding_gives_the_same_bytes(tmp_path, write_jsonl, gpt2_files):
    vocab, merges = gpt2_files
    factory = functools.partial(load_tokenizer, "GPT2BPETokenizer", vocab_file=vocab,
                                merge_file=merges)
    path = write_jsonl("in.jsonl", [{"text": t} for t in _texts(40)])
    batched = preprocess_jsonl([path], str(tmp_path / "b"), factory, append_eod=True)
    single = preprocess_jsonl([path], str(tmp_path / "s"), lambda: EncodeOnly(factory()),
                              append_eod=True)
    assert files_of(batched.output_prefixes["text"]) == files_of(single.output_prefixes["text"])
    assert batched.tokens < sum(len(t.encode()) + 1 for t in _texts(40))


def test_lone_surrogate_is_a_bad_line_with_a_batch_encoder(gpt2_files):
    tokenizer = load_tokenizer("GPT2BPETokenizer", vocab_file=gpt2_files[0],
                               merge_file=gpt2_files[1])
    lines = [b'{"text": "ok"}\n', b'{"text": "a\\ud800b"}\n', b'{"text": "fine \\u00e9"}\n']
    chunk = tokenize_chunk(lines, tokenizer, ["text"], skip_bad_lines=True, path="f.jsonl")
    assert chunk.documents == 2 and chunk.bad_lines == {"invalid_utf8": 1}
    assert "f.jsonl, line 2: key 'text' holds text that is not valid Unicode" in (
        chunk.bad_examples[0])
    assert chunk.line_offsets.tolist() == [0, 2]


def test_split_sentences_one_sequence_each(tmp_path, write_jsonl):
    texts = ["First one. Second one! Third?", "", "Only one", ". . ."]
    path = write_jsonl("in.jsonl", [{"text": t, "t2": t.upper()} for t in texts])
    splitter = functools.partial(SentencexSplitter, "english")
    summary = preprocess_jsonl([path], str(tmp_path / "o"), ByteTokenizer, append_eod=True,
                               json_keys=["text", "t2"], splitter_factory=splitter)
    assert summary.output_prefixes == {"text": str(tmp_path / "o_text_sentence"),
                                       "t2": str(tmp_path / "o_t2_sentence")}
    documents = read_documents(summary.output_prefixes["text"])
    split = SentencexSplitter("english")
    expected = []
    for text in texts:
        sentences = [list(s.encode()) for s in split.split(text) if s]
        if sentences:
            sentences[-1] = sentences[-1] + [256]  # the EOD ends the document's last sentence
        expected.append(sentences)
    assert documents == expected
    assert [len(d) for d in documents][:3] == [3, 0, 1]
    assert read_documents(summary.output_prefixes["t2"])[0][0][:5] == list(b"FIRST")


def test_sentences_that_tokenize_to_nothing_are_dropped():
    lines = [json.dumps({"text": "x"}).encode() + b"\n"]

    class Sentences:
        def split(self, text):
            return ["", "ab", "", "c", ""]

    chunk = tokenize_chunk(lines, ByteTokenizer(), ["text"], append_eod=True,
                           splitter=Sentences(), dtype=np.uint16)
    assert chunk.sequence_lengths["text"].tolist() == [2, 2]
    assert chunk.document_sequences["text"].tolist() == [2]
    assert chunk.tokens["text"].tolist() == [97, 98, 99, 256]
