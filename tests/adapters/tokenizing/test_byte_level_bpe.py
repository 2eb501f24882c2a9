"""tiktoken's rank merging in place of pair merging (megadata_adapters.tokenizing.byte_level_bpe),
and gigatoken
in front of it (megadata_adapters.tokenizing.gigatoken_encoders).

Where the merges are canonical, GPT2BPETokenizer and plain HuggingFaceTokenizer files
encode through tiktoken; the ids must be those of the ``tokenizers`` BPE model on any
text. Merges that are not canonical fall back to ``tokenizers`` (and there tiktoken
would indeed give other ids).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tokenizer_files as files
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from megadata_adapters.tokenizing.byte_level_bpe import (
    bytes_to_unicode,
    rank_encoder,
    tokenizer_json_encoder,
)
from megadata_adapters.tokenizing.text_tokenizers import load_tokenizer

PIECES = [
    "the", " cat", "'s", "'ll", " don't", "Zürich", "naïve", "e\u0301", "東京", "서울", "😀",
    "\x00", "\x07", "\x1b[31m", "\x1c\x1d\x1e\x1f", "\x85", "\u2028", "\u200b", "\ufeff",
    "\u00a0", "\u3000", "\t", "\n", "\r\n", "   ", "\n\n\n", " " * 40, "123", "١٢٣", "５６",
    "<s>", "</s>", "<pad>", "<|endoftext|>", "ab", "abc",
]
texts = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(PIECES), max_size=40).map("".join),
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=5)), max_size=30).map("".join),
    st.binary(max_size=200).map(lambda raw: raw.decode("utf-8", "replace")),
    st.binary(max_size=200).map(lambda raw: raw.decode("latin-1")),
    st.text(st.sampled_from(" \t\n\r\x0b\x0c\u00a0\u2028a"), max_size=300),
)


@pytest.fixture(scope="module")
def bpe_files(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("bpe"))
    vocab, merges = files.write_gpt2_files(directory)
    hf_dir = files.write_hf_directory(directory)
    return {"vocab_file": vocab, "merge_file": merges, "hf_dir": hf_dir}


@pytest.fixture(scope="module")
def tokenizers_pair(bpe_files):
    gpt2 = load_tokenizer("GPT2BPETokenizer", vocab_file=bpe_files["vocab_file"],
                          merge_file=bpe_files["merge_file"])
    hf = load_tokenizer("HuggingFaceTokenizer", tokenizer_model=bpe_files["hf_dir"])
    return gpt2, hf


def rust_ids(tokenizer, text):
    return tokenizer._tokenizer.encode(text, add_special_tokens=False).ids


def test_trained_merges_take_tiktoken(tokenizers_pair):
    gigatoken = pytest.importorskip("gigatoken", reason="without gigatoken tiktoken encodes")
    assert gigatoken
    for tokenizer in tokenizers_pair:  # gigatoken first; tiktoken for what it cannot prove
        assert tokenizer.encoder.startswith("gigatoken"), tokenizer.encoder
        assert "go to tiktoken" in tokenizer.encoder and tokenizer._ranks is not None


def test_trained_merges_take_tiktoken_without_gigatoken(bpe_files):
    tokenizer = load_tokenizer("GPT2BPETokenizer", vocab_file=bpe_files["vocab_file"],
                               merge_file=bpe_files["merge_file"], encoder="reference")
    assert tokenizer.encoder.startswith("tiktoken"), tokenizer.encoder


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts)
def test_same_ids_as_tokenizers(tokenizers_pair, text):
    for tokenizer in tokenizers_pair:
        assert tokenizer.encode(text).tolist() == rust_ids(tokenizer, text)


@settings(max_examples=50, deadline=None)
@given(batch=st.lists(texts, max_size=12))
def test_batch_same_ids_as_tokenizers(tokenizers_pair, batch):
    for tokenizer in tokenizers_pair:
        ids, lengths = tokenizer.encode_batch(batch)
        expected = [rust_ids(tokenizer, text) for text in batch]
        assert lengths.tolist() == [len(e) for e in expected]
        assert ids.tolist() == sum(expected, [])


# code points unassigned in Unicode 14.0 (the reference encodes what holds them), and the
# places GPT-2's expression is cut at (a newline after printable ASCII) or not
UNPROVEN_PIECES = ["\U00010d70", "\ua7cd", "\U0001fae8", "\U00016ebb", "a\n", ".\n", "'\n",
                   "~\n", " \n", "\n", "\r\n", "\n\n", "é\n", "a", " b", "'s", "\t", "  ", "1",
                   "東京", "<|endoftext|>", "\u2028"]
long_texts = st.lists(st.sampled_from(UNPROVEN_PIECES), max_size=400).map("".join)


@pytest.fixture(scope="module")
def spaces_tokenizer(tmp_path_factory):
    """A byte-level BPE trained on UNPROVEN_PIECES: merges across spaces and newlines
    (" \\n", "\\n ", ".\\n"...), so that a wrong cut shows in the ids."""
    rng = np.random.default_rng(0)
    texts = ["".join(rng.choice(UNPROVEN_PIECES[4:], size=30)) for _ in range(3000)]
    directory = files.write_hf_directory(str(tmp_path_factory.mktemp("spaces")), texts)
    return load_tokenizer("HuggingFaceTokenizer", tokenizer_model=directory)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(st.one_of(long_texts, texts), max_size=6))
def test_texts_with_unproven_code_points_in_pieces(tokenizers_pair, spaces_tokenizer, batch):
    """A text holding a code point gigatoken is not proven on is cut before each newline
    after printable ASCII; only its pieces holding one go to the reference: the ids are
    still tokenizers' own, text by text and in batches."""
    for tokenizer in (*tokenizers_pair, spaces_tokenizer):
        expected = [rust_ids(tokenizer, text) for text in batch]
        assert [tokenizer.encode(text).tolist() for text in batch] == expected
        ids, lengths = tokenizer.encode_batch(batch)
        assert lengths.tolist() == [len(e) for e in expected]
        assert ids.tolist() == sum(expected, [])


def test_pieces_are_cut_only_where_no_added_token_crosses(tokenizers_pair):
    pytest.importorskip("gigatoken", reason="the pieces are gigatoken's encoder's")
    from megadata_adapters.tokenizing import gigatoken_encoders as giga

    encoder = tokenizers_pair[1].block_encoder
    pieces, holds = encoder.pieces("ab\n\U00010d70 c.\n d \n\ne\n")
    assert pieces == ["ab", "\n\U00010d70 c.", "\n d \n\ne", "\n"]
    assert holds.tolist() == [False, True, False, False]
    assert giga._gpt2_cuts({"<|endoftext|>": 0}) is giga.GPT2_CUTS
    assert giga._gpt2_cuts({"<|endoftext|>": 0, "a\nb": 1}) is None


def test_every_basic_plane_character(tokenizers_pair):
    """Each BMP character between letters, digits, spaces and marks: tiktoken's and
    tokenizers' regex engines must class every one alike (letter, number, space)."""
    chars = [chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF]
    batch = [" ".join(chars[i:i + 64]) + "".join(c + "a1'" for c in chars[i:i + 64])
             for i in range(0, len(chars), 64)]
    gpt2, _ = tokenizers_pair
    ids, lengths = gpt2.encode_batch(batch)
    expected = gpt2._tokenizer.encode_batch_fast(batch, add_special_tokens=False)
    assert lengths.tolist() == [len(e.ids) for e in expected]
    assert np.array_equal(ids, np.concatenate([e.ids for e in expected]))


# -- merges that are not canonical: tokenizers is kept, and tiktoken would differ


def small_bpe(merges):
    """A vocab of the 256 byte symbols plus each merge's result, in merge order."""
    vocab = {char: byte for byte, char in bytes_to_unicode().items()}
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    vocab["<|endoftext|>"] = len(vocab)
    return vocab


def write_bpe(directory, merges):
    vocab = small_bpe(merges)
    vocab_path, merges_path = os.path.join(directory, "v.json"), os.path.join(directory, "m.txt")
    with open(vocab_path, "w", encoding="utf-8") as stream:
        json.dump(vocab, stream)
    with open(merges_path, "w", encoding="utf-8") as stream:
        stream.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    return vocab_path, merges_path


def tiktoken_pieces(merges, text):
    """The tokens (as bytes) plain tiktoken ranks (merge k's result = 256 + k) would give."""
    import tiktoken

    from megadata_adapters.tokenizing.byte_level_bpe import GPT2_PATTERN

    to_byte = {char: byte for byte, char in bytes_to_unicode().items()}
    ranks = {bytes([b]): b for b in range(256)}
    for k, (left, right) in enumerate(merges):
        ranks.setdefault(bytes(to_byte[c] for c in left + right), 256 + k)
    encoding = tiktoken.Encoding("t", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                                 special_tokens={})
    return [encoding.decode_single_token_bytes(i) for i in encoding.encode_ordinary(text)]


@pytest.mark.parametrize(
    "merges, text, why",
    [
        # "abc" pair-merges to [ab, c]; tiktoken would join ab+c (a token) into abc
        ([("a", "b"), ("b", "c"), ("a", "bc")], "abc", "not encoded to itself"),
        # "abcd" pair-merges to [a, bc, d]; tiktoken emits the whole pre-token abcd
        ([("b", "c"), ("a", "b"), ("c", "d"), ("ab", "cd")], "abcd", "not encoded to itself"),
        # merge 1 uses "ab" before merge 2 makes it
        ([("ab", "c"), ("a", "b")], "abc", "no earlier merge made"),
        # two merges make "abc"
        ([("a", "b"), ("b", "c"), ("ab", "c"), ("a", "bc")], "abc", "again"),
    ],
)
def test_merges_that_are_not_canonical_keep_tokenizers(tmp_path, merges, text, why):
    vocab_path, merges_path = write_bpe(str(tmp_path), merges)
    tokenizer = load_tokenizer("GPT2BPETokenizer", vocab_file=vocab_path, merge_file=merges_path)
    assert tokenizer.encoder.startswith("tokenizers") and why in tokenizer.encoder
    assert tokenizer.encode(text).tolist() == rust_ids(tokenizer, text)
    to_byte = {char: byte for byte, char in bytes_to_unicode().items()}
    pieces = [bytes(to_byte[c] for c in token)
              for token in tokenizer._tokenizer.encode(text, add_special_tokens=False).tokens]
    if why == "not encoded to itself":  # the check is needed: tiktoken differs here
        assert tiktoken_pieces(merges, text) != pieces


def test_missing_byte_keeps_tokenizers():
    vocab = small_bpe([])
    del vocab["a"]
    encoder, why = rank_encoder(vocab, [])
    assert encoder is None and f"byte {ord('a')}" in why


def hf_config(bpe_files):
    with open(os.path.join(bpe_files["hf_dir"], "tokenizer.json"), encoding="utf-8") as stream:
        return json.load(stream)


@pytest.mark.parametrize(
    "change, why",
    [
        (lambda c: c.update(normalizer={"type": "NFC"}), "normalizer"),
        (lambda c: c["pre_tokenizer"].update(add_prefix_space=True), "pre-tokenizer"),
        (lambda c: c["model"].update(dropout=0.1), "plain BPE"),
        (lambda c: c.update(truncation={"max_length": 8, "strategy": "LongestFirst",
                                        "stride": 0, "direction": "Right"}), "truncates"),
        (lambda c: c["added_tokens"][0].update(lstrip=True), "lstrip"),
        (lambda c: c["added_tokens"].append(
            dict(c["added_tokens"][0], id=9999, content="s><pad")), "overlap"),
    ],
)
def test_tokenizer_json_that_is_not_plain_keeps_tokenizers(bpe_files, change, why):
    config = hf_config(bpe_files)
    assert tokenizer_json_encoder(config)[0] is not None
    change(config)
    encoder, reason = tokenizer_json_encoder(config)
    assert encoder is None and why in reason


def test_loaded_tokenizer_json_with_normalizer_falls_back(tmp_path, bpe_files):
    config = hf_config(bpe_files)
    config["normalizer"] = {"type": "Lowercase"}
    (tmp_path / "tokenizer.json").write_text(json.dumps(config), encoding="utf-8")
    tokenizer = load_tokenizer("huggingface", str(tmp_path / "tokenizer.json"))
    assert tokenizer.encoder == "tokenizers (not tiktoken or gigatoken: it has a normalizer)"
    assert tokenizer.encode("ABC Def").tolist() == rust_ids(tokenizer, "abc def")
