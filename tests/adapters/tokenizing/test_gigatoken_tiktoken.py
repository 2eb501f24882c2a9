"""gigatoken for tiktoken ranks files: which of its pre-tokenizer schemes splits text as
each expression (measured), and the proof wired into the ``tiktoken`` type."""

from __future__ import annotations

import base64
import os
import unicodedata

import numpy as np
import pytest
import tokenizer_files as files
from hypothesis import given, settings
from hypothesis import strategies as st

from megadata_adapters.tokenizing import gigatoken_encoders as giga
from megadata_adapters.tokenizing.megatron_tokenizers import TIKTOKEN_PATTERNS
from megadata_adapters.tokenizing.text_tokenizers import (
    DEFAULT_SPLIT_PATTERN,
    TiktokenTokenizer,
    load_tokenizer,
)
from megadata_adapters.tokenizing.unicode_14 import unassigned_14

gigatoken = pytest.importorskip("gigatoken")
tiktoken = pytest.importorskip("tiktoken")

SCHEMES = ("gpt2", "gpt4", "o200k", "qwen2", "qwen35", "olmo3", "deepseek_v3", "nemotron",
           "kimi")
PIECES = ["'s", "'S", "'ll", "'LL", "'ve", "'re", "'t", "'d", "'m", "\u017f", "\u212a",
          "'\u017f", "'\u212a", " ", "  ", "\n", "\r\n", "\t", "a", "A", "Ab", "aB", "é", "É",
          "1", "12", "1234", "١", "/", "//", ".", "!?", "\u0301", "ǅ", "ʰ", "中", "😀",
          "\u00a0", "\u3000", "\u2028", "\x0b", "x", "'", "''", "\u2162", "½", "_"]


def _write_ranks(path, tokens) -> str:
    with open(path, "wb") as stream:
        stream.writelines(base64.b64encode(t) + b" %d\n" % i for i, t in enumerate(tokens))
    return str(path)


def _splits(texts, patterns, schemes, directory):
    """{(pattern name, scheme): indices of texts split otherwise}. The vocabulary holds every
    byte substring of the texts, so both encoders make each pre-token one token: equal ids
    are equal splits."""
    substrings = set()
    for text in texts:
        raw = text.encode()
        substrings.update(raw[i:j] for i in range(len(raw)) for j in range(i + 2, len(raw) + 1))
    tokens = [bytes([b]) for b in range(256)] + sorted(substrings, key=lambda s: (len(s), s))
    path = _write_ranks(os.path.join(directory, "substrings.tiktoken"), tokens)
    ranks = {token: rank for rank, token in enumerate(tokens)}
    reference = {}
    for name, pattern in patterns.items():
        encoding = tiktoken.Encoding(name=name, pat_str=pattern, mergeable_ranks=ranks,
                                     special_tokens={})
        reference[name] = [encoding.encode_ordinary(text) for text in texts]
    found = {}
    for scheme in schemes:
        tokenizer = gigatoken.Tokenizer.from_tiktoken(path, pretokenizer=scheme)
        ids, lengths = giga._arrays(tokenizer.encode_batch(texts, parallel=False))
        mine = [part.tolist() for part in np.split(ids, np.cumsum(lengths)[:-1])]
        for name, ids in reference.items():
            found[name, scheme] = [i for i, (a, b) in enumerate(zip(ids, mine)) if a != b]
    return found


PATTERNS = {"cl100k": DEFAULT_SPLIT_PATTERN, "v1": TIKTOKEN_PATTERNS["v1"],
            "v2": TIKTOKEN_PATTERNS["v2"]}


def test_which_scheme_splits_as_which_expression(tmp_path):
    """On the battery and mixed texts: cl100k_base's expression splits as "olmo3", Megatron's
    v2 as "nemotron", Megatron's v1 as no scheme (each differs somewhere)."""
    rng = np.random.default_rng(0)
    texts = list(giga.BATTERY) + ["".join(rng.choice(PIECES, size=int(rng.integers(1, 9))))
                                  for _ in range(3000)]
    found = _splits(texts, PATTERNS, SCHEMES, str(tmp_path))
    agree = {key for key, bad in found.items() if not bad}
    assert agree == {("cl100k", "olmo3"), ("v2", "nemotron")}
    assert giga.CL100K_SCHEME == "olmo3" and giga.MEGATRON_SCHEMES == {"v2": "nemotron"}


def test_no_scheme_plus_a_pre_split_gives_v1(tmp_path):
    """A pre-split of ours can only add cuts to a scheme's; every scheme cuts some text
    inside one of Megatron's v1 pre-tokens (qwen2, the closest, makes every cut v1 makes
    and splits contractions off letters: ``'S中``), so no scheme plus a pre-split splits
    as v1: v1 stays on tiktoken."""
    rng = np.random.default_rng(0)
    texts = list(giga.BATTERY) + ["".join(rng.choice(PIECES, size=int(rng.integers(1, 9))))
                                  for _ in range(3000)]
    substrings = set()
    for text in texts:
        raw = text.encode()
        substrings.update(raw[i:j] for i in range(len(raw)) for j in range(i + 2, len(raw) + 1))
    tokens = [bytes([b]) for b in range(256)] + sorted(substrings, key=lambda s: (len(s), s))
    path = _write_ranks(tmp_path / "substrings.tiktoken", tokens)
    ranks = {token: rank for rank, token in enumerate(tokens)}
    v1 = tiktoken.Encoding(name="v1", pat_str=TIKTOKEN_PATTERNS["v1"], mergeable_ranks=ranks,
                           special_tokens={})

    def cuts(ids) -> set[int]:  # each pre-token is one token: its end is a cut
        return set(np.cumsum([len(tokens[i]) for i in ids]).tolist())

    theirs = [cuts(v1.encode_ordinary(text)) for text in texts]
    inside = {}
    for scheme in SCHEMES:
        tokenizer = gigatoken.Tokenizer.from_tiktoken(path, pretokenizer=scheme)
        ids, lengths = giga._arrays(tokenizer.encode_batch(texts, parallel=False))
        mine = [cuts(part.tolist()) for part in np.split(ids, np.cumsum(lengths)[:-1])]
        inside[scheme] = [texts[i] for i in range(len(texts)) if mine[i] - theirs[i]]
        if scheme == "qwen2":
            assert all(theirs[i] <= mine[i] for i in range(len(texts)))
    assert all(inside.values()), {scheme: len(found) for scheme, found in inside.items()}
    assert "\x0b1234'S中" in inside["qwen2"]


def _code_points() -> list[int]:
    """Every BMP code point but surrogates, every astral one Python's tables assign below
    the private use planes, and the ends of those planes (all private use, one class)."""
    bmp = [c for c in range(0x10000) if not 0xD800 <= c < 0xE000]
    ends = [*range(0xF0000, 0xF0100), *range(0x10FF00, 0x10FFFE)]
    return bmp + [c for c in range(0x10000, 0xF0000)
                  if unicodedata.category(chr(c)) != "Cn"] + ends


def test_every_code_point_splits_alike_but_unassigned_in_14(tmp_path):
    """Each code point between letters, after a space and before a digit, after an
    apostrophe before a newline (contractions fold case: 'ſ', 'K'), between dots, and
    twice: the splits of
    cl100k_base's expression and "olmo3", of v2 and "nemotron", differ only on code points
    unassigned in Unicode 14.0, which go to tiktoken."""
    contexts = ("a{}b", " {}1", "'{}\n", ".{}.", "{0}{0}")
    points = _code_points()
    unassigned = unassigned_14()
    step = 20000
    for start in range(0, len(points), step):
        chunk = points[start:start + step]
        texts = [context.format(chr(c)) for c in chunk for context in contexts]
        found = _splits(texts, {"cl100k": PATTERNS["cl100k"], "v2": PATTERNS["v2"]},
                        ("olmo3", "nemotron"), str(tmp_path))
        for key in (("cl100k", "olmo3"), ("v2", "nemotron")):
            bad = np.array(sorted({chunk[i // len(contexts)] for i in found[key]}), np.int64)
            inside = ((unassigned[:, 0] <= bad[:, None]) & (bad[:, None] < unassigned[:, 1])
                      ).any(axis=1) if bad.size else np.ones(0, bool)
            assert inside.all(), (key, [hex(c) for c in bad[~inside][:10]])


@pytest.fixture(scope="module")
def ranks_file(tmp_path_factory):
    return files.write_tiktoken_ranks(str(tmp_path_factory.mktemp("ranks")), 2000)


def test_the_default_expression_takes_gigatoken(ranks_file):
    tokenizer = TiktokenTokenizer(ranks_file)
    assert tokenizer.encoder.startswith("gigatoken (tiktoken rank merging"), tokenizer.encoder
    assert "unassigned in Unicode 14.0 go to tiktoken" in tokenizer.encoder
    assert tokenizer.block_encoder is not None
    reference = TiktokenTokenizer(ranks_file, encoder="reference")
    assert reference.encoder == "tiktoken (--encoder reference)"
    assert reference.block_encoder is None
    for text in [*giga.BATTERY, *files.training_text()[:200], "\U0001fae8 unassigned in 14"]:
        mine, theirs = tokenizer.encode(text), reference.encode(text)
        assert mine.dtype == theirs.dtype and mine.tolist() == theirs.tolist(), text


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.one_of(st.text(max_size=40),
                                st.lists(st.sampled_from(PIECES), max_size=12).map("".join)),
                      max_size=8))
def test_ids_equal_tiktokens(ranks_file, texts):
    tokenizer = load_tokenizer("tiktoken", ranks_file)
    reference = load_tokenizer("tiktoken", ranks_file, encoder="reference")
    texts = [t.encode("utf-8", "replace").decode() for t in texts]
    for text in texts:
        assert tokenizer.encode(text).tolist() == reference.encode(text).tolist()
    mine, theirs = tokenizer.encode_batch(texts), reference.encode_batch(texts)
    assert mine[0].tolist() == theirs[0].tolist() and mine[1].tolist() == theirs[1].tolist()


def test_other_expressions_stay_on_tiktoken(ranks_file):
    tokenizer = TiktokenTokenizer(ranks_file, pattern=TIKTOKEN_PATTERNS["v1"])
    assert tokenizer.encoder == (
        "tiktoken (not gigatoken: no gigatoken pre-tokenizer is known to split as this "
        "expression (measured for cl100k_base's only))")
    assert tokenizer.block_encoder is None


def test_a_token_tiktoken_cannot_build_stays_on_tiktoken(tmp_path):
    """"abc" with neither "ab" nor "bc": tiktoken's merging never joins it, so no merge of
    gigatoken's may make it."""
    path = _write_ranks(tmp_path / "odd.tiktoken", [bytes([b]) for b in range(256)] + [b"abc"])
    tokenizer = TiktokenTokenizer(path)
    assert tokenizer.block_encoder is None
    assert tokenizer.encoder.startswith("tiktoken (not gigatoken: "), tokenizer.encoder
    assert tokenizer.encode("abc abcd").tolist() == TiktokenTokenizer(
        path, encoder="reference").encode("abc abcd").tolist()


def test_the_verdict_is_cached(ranks_file, monkeypatch):
    TiktokenTokenizer(ranks_file)  # stored (or already)
    calls = []
    real = giga.tiktoken_ranks
    monkeypatch.setattr(giga, "tiktoken_ranks",
                        lambda *a, **k: calls.append(k["proven"]) or real(*a, **k))
    assert TiktokenTokenizer(ranks_file).block_encoder is not None
    assert calls == [True]


def test_a_changed_file_is_not_loaded_for_more_instances(tmp_path):
    path = _write_ranks(tmp_path / "t.tiktoken", [bytes([b]) for b in range(256)] + [b"ab"])
    encoder = TiktokenTokenizer(path).block_encoder
    _write_ranks(path, [bytes([b]) for b in range(256)] + [b"ba"])
    reloaded = giga.load_config(encoder._source, encoder._backend)
    assert reloaded[1].endswith("changed since its proof")
