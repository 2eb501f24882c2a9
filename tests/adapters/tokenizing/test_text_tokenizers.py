"""megadata_adapters.tokenizing.text_tokenizers: HuggingFace and tiktoken tokenizers built offline
in the test."""

from __future__ import annotations

import base64
import functools
import pickle

import numpy as np
import pytest
from preprocess_helpers import TEXTS, expected_sequences, read_documents

from megadata_adapters.tokenizing.text_tokenizers import (
    HuggingFaceTokenizer,
    TiktokenTokenizer,
    load_tokenizer,
)
from megadata_core import DataError, IndexedDataset
from megadata_core.preprocess import ByteTokenizer, preprocess_jsonl

SENTENCES = [
    "the cat sat on the mat",
    "the dog sat on the log",
    "a cat and a dog are friends",
    "Zürich and 東京 are cities",
] * 5


def train_hf_tokenizer(path, special_tokens=("<|endoftext|>",)):
    """A tiny byte-level BPE trained on SENTENCES, saved as tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(SENTENCES, trainer)
    tokenizer.save(str(path))
    return tokenizer


@pytest.fixture
def hf_file(tmp_path):
    path = tmp_path / "tokenizer.json"
    train_hf_tokenizer(path)
    return str(path)


def test_huggingface_tokenizer(hf_file):
    from tokenizers import Tokenizer

    reference = Tokenizer.from_file(hf_file)
    tokenizer = HuggingFaceTokenizer(hf_file)
    assert tokenizer.eod_id == reference.token_to_id("<|endoftext|>")
    assert tokenizer.vocab_size == reference.get_vocab_size()
    text = "the cat sat on the log"
    ids = tokenizer.encode(text)
    assert ids.tolist() == reference.encode(text, add_special_tokens=False).ids
    assert len(ids) < len(text.encode())  # merges were used
    assert tokenizer.decode(ids) == text


def test_huggingface_eod_choice(tmp_path):
    path = tmp_path / "t.json"
    train_hf_tokenizer(path, special_tokens=("<pad>", "</s>"))
    assert HuggingFaceTokenizer(str(path)).eod_id == 1  # first present candidate
    assert HuggingFaceTokenizer(str(path), eod_token="<pad>").eod_id == 0
    with pytest.raises(DataError, match="eod_token '<eos>' is not in the vocabulary"):
        HuggingFaceTokenizer(str(path), eod_token="<eos>")
    bare = tmp_path / "bare.json"
    train_hf_tokenizer(bare, special_tokens=())
    with pytest.raises(DataError, match="no end-of-document token"):
        HuggingFaceTokenizer(str(bare))


def test_huggingface_preprocess(tmp_path, hf_file, write_jsonl):
    path = write_jsonl("in.jsonl", [{"text": t} for t in TEXTS])
    factory = functools.partial(load_tokenizer, "huggingface", hf_file)
    summary = preprocess_jsonl([path], str(tmp_path / "o"), factory, append_eod=True, workers=2,
                               start_method="spawn")  # the factory travels by pickle
    tokenizer = HuggingFaceTokenizer(hf_file)
    expected = expected_sequences(TEXTS, encode=tokenizer.encode, eod=tokenizer.eod_id)
    assert read_documents(summary.output_prefixes["text"]) == expected
    assert IndexedDataset(summary.output_prefixes["text"]).dtype == np.uint16


def write_tiktoken_file(path, merges=(b"th", b"he", b"the", b" t", b" the", b"at", b"cat")):
    """256 single-byte ranks, then the merges; returns the ranks."""
    ranks = {bytes([b]): b for b in range(256)}
    for token in merges:
        ranks[token] = len(ranks)
    with open(path, "wb") as stream:
        for token, rank in ranks.items():
            stream.write(base64.b64encode(token) + b" " + str(rank).encode() + b"\n")
    return ranks


def test_tiktoken_tokenizer(tmp_path):
    path = tmp_path / "tiny.tiktoken"
    ranks = write_tiktoken_file(path)
    tokenizer = TiktokenTokenizer(str(path))
    assert (tokenizer.eod_id, tokenizer.vocab_size) == (len(ranks), len(ranks) + 1)
    ids = tokenizer.encode("the cat")
    assert ids.tolist() == [ranks[b"the"], ranks[b" "], ranks[b"cat"]]
    assert tokenizer.decode(ids) == "the cat"
    # special-token text is ordinary text, never the eod id
    assert tokenizer.eod_id not in tokenizer.encode("<|endoftext|>").tolist()


def test_tiktoken_preprocess(tmp_path, write_jsonl):
    bpe = tmp_path / "tiny.tiktoken"
    ranks = write_tiktoken_file(bpe)
    texts = ["the cat", "", "then the hat"]
    path = write_jsonl("in.jsonl", [{"text": t} for t in texts])
    factory = functools.partial(load_tokenizer, "tiktoken", str(bpe))
    summary = preprocess_jsonl([path], str(tmp_path / "o"), factory, append_eod=True)
    documents = read_documents(summary.output_prefixes["text"])
    assert documents[0] == [[ranks[b"the"], ranks[b" "], ranks[b"cat"], len(ranks)]]
    assert documents[1] == []
    assert documents[2][0][-1] == len(ranks)


def test_tiktoken_rewritten_file_is_reread(tmp_path):
    path = tmp_path / "same-name.tiktoken"
    write_tiktoken_file(path, merges=(b"ab",))
    assert TiktokenTokenizer(str(path)).encode("ab").tolist() == [256]
    write_tiktoken_file(path, merges=(b"xy", b"ab"))  # same path, new content
    assert TiktokenTokenizer(str(path)).encode("ab").tolist() == [257]


def test_tiktoken_bad_files(tmp_path):
    partial_bytes = tmp_path / "partial.tiktoken"
    partial_bytes.write_bytes(b"".join(base64.b64encode(bytes([b])) + b" %d\n" % b
                                       for b in range(100)))
    with pytest.raises(DataError, match="single bytes have no rank"):
        TiktokenTokenizer(str(partial_bytes))
    garbage = tmp_path / "garbage.tiktoken"
    garbage.write_bytes(b"not a ranks file at all\n")
    with pytest.raises(DataError, match="garbage.tiktoken"):
        TiktokenTokenizer(str(garbage))


def test_load_tokenizer_kinds(tmp_path, hf_file):
    assert isinstance(load_tokenizer("bytes"), ByteTokenizer)
    factory = functools.partial(load_tokenizer, "huggingface", hf_file)
    assert isinstance(pickle.loads(pickle.dumps(factory))(), HuggingFaceTokenizer)
    with pytest.raises(DataError, match="not one of"):
        load_tokenizer("sentencepiece", hf_file)
    with pytest.raises(DataError, match="downloading is not supported"):
        load_tokenizer("tiktoken", "https://example.com/cl100k_base.tiktoken")
    with pytest.raises(DataError, match="not found"):
        load_tokenizer("huggingface", str(tmp_path / "missing.json"))
    with pytest.raises(DataError, match="required"):
        load_tokenizer("huggingface")
