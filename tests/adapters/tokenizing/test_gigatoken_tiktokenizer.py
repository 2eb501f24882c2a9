"""gigatoken for Megatron's TikTokenizer (``--tiktoken-pattern v2``): ids equal to tiktoken's
with special tokens in the text, any ``--tiktoken-num-special-tokens`` and ``--vocab-size``
cut; ``v1`` and files the proof does not cover stay on tiktoken and say why; the corpus
``tools/preprocess_data.py`` writes is the same bytes with either encoder."""

from __future__ import annotations

import functools
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import tokenizer_files as files
from hypothesis import given, settings
from hypothesis import strategies as st
from preprocess_helpers import REPO, files_of, read_documents

from megadata_adapters.tokenizing import gigatoken_encoders as giga
from megadata_adapters.tokenizing.megatron_tokenizers import MegatronTikTokenizer
from megadata_adapters.tokenizing.text_tokenizers import load_tokenizer
from megadata_core import DataError

gigatoken = pytest.importorskip("gigatoken")
pytest.importorskip("tiktoken")

RANKS = 1999  # the trained file's ranks: 256 bytes and 1743 merges
# (num_special_tokens, vocab_size): every rank, Megatron's default specials, a cut of the
# merges, the bytes alone
SHAPES = [(7, 7 + RANKS), (1000, 1000 + RANKS), (1000, 1600), (300, 556)]
SPECIALS = ["<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>", "<SPECIAL_7>",
            "<SPECIAL_299>", "<SPECIAL_300>", "<SPECIAL_999>", "<SPECIAL_1000>"]
PIECES = [*SPECIALS, "<", ">", "s>", "</", "<SPECIAL_", "the", " the", "The", "'s", " ",
          "  ", "\n", "\r\n", "\t", "é", "É", "1", "123", "/", "//", "中", "😀", "\u0301",
          "\u00a0", "\u2028", "x", "\U0001fae8"]


@pytest.fixture(scope="module")
def vocabulary(tmp_path_factory):
    return files.write_trained_tiktoken_json(str(tmp_path_factory.mktemp("mtt")))


@functools.cache
def _pair(path: str, specials: int, vocab_size: int, pattern: str = "v2"):
    """(auto, reference) tokenizers, built once per shape."""
    options = dict(tokenizer_model=path, tiktoken_num_special_tokens=specials,
                   vocab_size=vocab_size, tiktoken_pattern=pattern)
    return (load_tokenizer("TikTokenizer", **options),
            load_tokenizer("TikTokenizer", encoder="reference", **options))


def test_v2_takes_gigatoken_and_v1_stays_on_tiktoken(vocabulary):
    tokenizer, reference = _pair(vocabulary, 1000, 1000 + RANKS)
    assert tokenizer.encoder == (
        "gigatoken (tiktoken rank merging equals gigatoken's merges; the pre-tokenizer splits "
        "alike; special tokens split out alike; texts with characters unassigned in Unicode "
        "14.0 go to tiktoken)")
    assert tokenizer.block_encoder is not None and tokenizer.block_encoder.shift == (RANKS, 1000)
    unassigned = "a \U0001fae8 </s>"  # a code point unassigned in Unicode 14.0: tiktoken's
    assert tokenizer.block_encoder.needs_reference(unassigned)
    assert tokenizer.encode(unassigned).tolist() == reference.encode(unassigned).tolist()
    assert reference.encoder == "tiktoken (--encoder reference)"
    assert reference.block_encoder is None
    v1 = load_tokenizer("TikTokenizer", tokenizer_model=vocabulary, tiktoken_pattern="v1",
                        vocab_size=1000 + RANKS)
    assert v1.encoder == ("tiktoken (not gigatoken: Megatron's v1 expression splits as none "
                          "of gigatoken's pre-tokenizer schemes (measured))")
    assert v1.block_encoder is None
    with pytest.raises(DataError, match="--use-gigatoken: gigatoken cannot run this tokenizer"):
        load_tokenizer("TikTokenizer", tokenizer_model=vocabulary, tiktoken_pattern="v1",
                       vocab_size=1000 + RANKS, encoder="gigatoken")


@pytest.mark.parametrize("specials, vocab_size", SHAPES)
def test_battery_and_training_text(vocabulary, specials, vocab_size):
    tokenizer, reference = _pair(vocabulary, specials, vocab_size)
    assert tokenizer.encoder.startswith("gigatoken"), tokenizer.encoder
    texts = [*giga.BATTERY, *files.training_text()[:300], " ".join(SPECIALS) + " the</s>"]
    for text in texts:
        mine, theirs = tokenizer.encode(text), reference.encode(text)
        assert mine.dtype == theirs.dtype and mine.tolist() == theirs.tolist(), text
    ids = tokenizer.encode(" ".join(SPECIALS[:7]) + "<SPECIAL_7>").tolist()
    assert [i for i in ids if i < specials] == list(range(min(specials, 8)))
    assert max(max(tokenizer.encode_batch(texts)[0]), 0) < vocab_size


texts = st.lists(st.one_of(st.text(max_size=30),
                           st.lists(st.sampled_from(PIECES), max_size=12).map("".join)),
                 max_size=8)


@pytest.mark.parametrize("specials, vocab_size", SHAPES)
@settings(max_examples=150, deadline=None)
@given(texts=texts)
def test_ids_equal_tiktokens(vocabulary, specials, vocab_size, texts):
    tokenizer, reference = _pair(vocabulary, specials, vocab_size)
    texts = [t.encode("utf-8", "replace").decode() for t in texts]
    for text in texts:
        assert tokenizer.encode(text).tolist() == reference.encode(text).tolist(), text
    mine, theirs = tokenizer.encode_batch(texts), reference.encode_batch(texts)
    assert mine[0].tolist() == theirs[0].tolist() and mine[1].tolist() == theirs[1].tolist()
    if not any(map(tokenizer.block_encoder.needs_reference, texts)):  # the block path's
        data = np.frombuffer("".join(texts).encode(), np.uint8)        # UTF-8 entry
        offsets = np.cumsum([0, *(len(t.encode()) for t in texts)])
        ids, lengths = tokenizer.block_encoder.encode_utf8(data, offsets)
        assert ids.tolist() == theirs[0].tolist() and lengths.tolist() == theirs[1].tolist()


def test_a_file_the_proof_does_not_cover_stays_on_tiktoken(tmp_path):
    """"abc" with neither "ab" nor "bc": tiktoken's merging never joins it, so no merge of
    gigatoken's may make it."""
    path = files.write_tiktoken_json(str(tmp_path), [b"abc"])
    options = dict(tokenizer_model=path, vocab_size=1257)
    tokenizer = load_tokenizer("TikTokenizer", **options)
    assert tokenizer.encoder == (
        "tiktoken (not gigatoken: token b'abc' (rank 256) is not the join of two tokens of "
        "lower rank)")
    assert tokenizer.block_encoder is None
    reference = load_tokenizer("TikTokenizer", encoder="reference", **options)
    assert tokenizer.encode("abc abcd</s>").tolist() == reference.encode("abc abcd</s>").tolist()
    with pytest.raises(DataError, match="is not the join of two tokens of lower rank"):
        load_tokenizer("TikTokenizer", encoder="gigatoken", **options)


def test_the_verdict_is_cached_per_file_and_options(vocabulary, monkeypatch):
    MegatronTikTokenizer(vocabulary, vocab_size=1000 + RANKS)  # stored (or already)
    calls = []
    real = giga.megatron_tiktoken
    monkeypatch.setattr(giga, "megatron_tiktoken",
                        lambda *a, **k: calls.append(k["proven"]) or real(*a, **k))
    assert MegatronTikTokenizer(vocabulary, vocab_size=1000 + RANKS).block_encoder is not None
    MegatronTikTokenizer(vocabulary, vocab_size=1000 + RANKS - 1)  # another cut: proven anew
    assert calls == [True, False]


def test_pickles_as_its_constructor_call(vocabulary):
    tokenizer = MegatronTikTokenizer(vocabulary, num_special_tokens=300, vocab_size=1600)
    copy = pickle.loads(pickle.dumps(tokenizer))
    assert copy.encoder == tokenizer.encoder and copy.block_encoder.shift == (1300, 300)
    text = "the <s>cat</s> sat"
    assert copy.encode(text).tolist() == tokenizer.encode(text).tolist()
    reference = pickle.loads(pickle.dumps(MegatronTikTokenizer(vocabulary, vocab_size=1600,
                                                               num_special_tokens=300,
                                                               encoder="reference")))
    assert reference.block_encoder is None and reference.mode == "reference"


_RUN = """
import runpy, sys
sys.argv = ["tools/preprocess_data.py", *sys.argv[1:]]
runpy.run_path("tools/preprocess_data.py", run_name="__main__")
"""


def test_the_corpus_is_the_same_bytes_with_either_encoder(tmp_path, vocabulary, write_jsonl):
    rng = np.random.default_rng(0)
    records = [{"text": "".join(rng.choice(PIECES, size=int(rng.integers(0, 30))))}
               for _ in range(300)]
    records += [{"text": text} for text in files.training_text()[:200]]
    source = write_jsonl("in.jsonl", records)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    prefixes, logs = {}, {}
    for encoder in ("auto", "reference"):
        prefix = str(tmp_path / encoder)
        result = subprocess.run(
            [sys.executable, "-c", _RUN, "--input", source, "--output-prefix", prefix,
             "--tokenizer-type", "TikTokenizer", "--tokenizer-model", vocabulary,
             "--tiktoken-pattern", "v2", "--vocab-size", str(1000 + RANKS), "--append-eod",
             "--encoder", encoder, "--noprogress"],
            capture_output=True, text=True, cwd=REPO, timeout=300, env=env)
        assert result.returncode == 0, result.stderr
        prefixes[encoder], logs[encoder] = prefix + "_text_document", result.stderr
    assert "encoder: gigatoken (tiktoken rank merging" in logs["auto"]
    assert "encoder: tiktoken (--encoder reference)" in logs["reference"]
    assert files_of(prefixes["auto"]) == files_of(prefixes["reference"])
    reference = _pair(vocabulary, 1000, 1000 + RANKS)[1]
    expected = [[reference.encode(r["text"]).tolist() + [2]] if r["text"] else []
                for r in records]
    assert read_documents(prefixes["auto"]) == expected


def test_special_tokens_that_could_overlap_are_refused():
    """The cuts at special tokens agree only when occurrences cannot overlap or nest."""
    tokens = [bytes([b]) for b in range(256)]
    found = giga.megatron_tiktoken(tokens, ["<s>", "<a<b>"], "nemotron", lambda text: [])
    assert found == (None, "special token '<a<b>' is not '<', characters other than '<>', '>'")
