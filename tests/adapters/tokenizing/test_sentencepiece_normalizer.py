"""SentencePiece models that normalize (nmt_nfkc, nfkc, their case-folding forms, a user's
rule table; with or without the dummy prefix and extra-whitespace removal) encode through
the array normalizer and gigatoken with sentencepiece's own ids, on every entry of their
character maps and on generated text; what the proof does not cover stays on
sentencepiece, and the log line says why."""

from __future__ import annotations

import io
import os
import re
import struct

import numpy as np
import pytest
import tokenizer_files as files
from hypothesis import example, given, settings
from hypothesis import strategies as st

from megadata_adapters.tokenizing import (
    gigatoken_sentencepiece,
    proof_cache,
    sentencepiece_normalizer,
)
from megadata_adapters.tokenizing.megatron_tokenizers import SentencePieceTokenizer
from megadata_adapters.tokenizing.sentencepiece_normalizer import (
    CODE_POINTS,
    Normalizer,
    read_charsmap,
)

sentencepiece = pytest.importorskip("sentencepiece")
pytest.importorskip("gigatoken", reason="the normalizer runs in front of gigatoken")

# A user's rule table (code points in hex, tab, replacement): a one-character key replaced
# by several characters, one deleted, one replaced by a space, and a key of two characters.
USER_RULES = ("41\t61\n"  # A -> a
              "e9\t65 301\n"  # é -> e + combining acute
              "2603\t\n"  # ☃ -> nothing
              "3000\t20\n"  # ideographic space -> space
              "3042 3099\t3094\n")  # two characters -> one
# Rule tables the proof refuses: a key whose second character is ASCII, and a replacement
# holding two spaces in a row (the whitespace rule then differs per replacement).
REFUSED_RULES = {"ascii second": "61 62\t63\n", "two spaces": "2603\t20 20\n"}

MODELS = {
    "nmt_nfkc": {},
    "nfkc": {"normalization_rule_name": "nfkc"},
    "nmt_nfkc_cf": {"normalization_rule_name": "nmt_nfkc_cf"},
    "nfkc_cf": {"normalization_rule_name": "nfkc_cf"},
    "nmt_nfkc, no dummy prefix": {"add_dummy_prefix": False},
    "nmt_nfkc, whitespace kept": {"remove_extra_whitespaces": False},
    "nmt_nfkc, neither": {"add_dummy_prefix": False, "remove_extra_whitespaces": False},
    "identity, whitespace removed": {"normalization_rule_name": "identity"},
    "user rules": {"normalization_rule_tsv": USER_RULES},
    "user rules, whitespace kept": {"normalization_rule_tsv": USER_RULES,
                                    "remove_extra_whitespaces": False},
}


def train(directory: str, name: str, options: dict) -> str:
    """A small BPE model with byte fallback trained with ``options`` (a rule table given
    as its text is written to a file first)."""
    options = dict(options)
    if "normalization_rule_tsv" in options:
        rules = os.path.join(directory, name.replace(" ", "_").replace(",", "") + ".tsv")
        with open(rules, "w") as stream:
            stream.write(options["normalization_rule_tsv"])
        options["normalization_rule_tsv"] = rules
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(files.training_text()), model_writer=model, vocab_size=500,
        model_type="bpe", byte_fallback=True, character_coverage=1.0, minloglevel=2,
        num_threads=1, **{"normalization_rule_name": "nmt_nfkc", **options})
    path = os.path.join(directory, name.replace(" ", "_").replace(",", "") + ".model")
    with open(path, "wb") as stream:
        stream.write(model.getvalue())
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("normalizing"))
    return {name: train(directory, name, options) for name, options in MODELS.items()}


@pytest.fixture(scope="module")
def tokenizers(models):
    return {name: SentencePieceTokenizer(path) for name, path in models.items()}


def _charsmap(path: str) -> bytes:
    with open(path, "rb") as stream:
        proto = stream.read()
    return gigatoken_sentencepiece._normalizer_spec(proto).get(2, b"")


def _reference(tokenizer, texts):
    return [tokenizer._processor.encode(text, out_type=int) for text in texts]


def _split(ids, lengths):
    ids = np.asarray(ids).tolist()
    out, at = [], 0
    for n in np.asarray(lengths).tolist():
        out.append(ids[at : at + n])
        at += n
    return out


def test_every_normalizing_model_takes_gigatoken(tokenizers):
    for name, tokenizer in tokenizers.items():
        assert tokenizer.encoder.startswith("gigatoken ("), (name, tokenizer.encoder)
        assert "as array operations" in tokenizer.encoder, tokenizer.encoder
        assert tokenizer.block_encoder.normalizer is not None
        assert not tokenizer.block_encoder.reads_json_natively


def test_the_map_read_holds_every_entry_sentencepiece_matches(models):
    """Every entry read from the trie is one sentencepiece applies (each key alone gives
    its replacement), the one-character keys go through the arrays alike, and every code
    point the map does not hold is left as it is."""
    for name, path in models.items():
        with open(path, "rb") as stream:
            spec = gigatoken_sentencepiece._normalizer_spec(stream.read())
        processor = sentencepiece.SentencePieceProcessor(model_file=path)
        normalizer, why = Normalizer.build(
            spec.get(2, b""), remove_extra_whitespaces=bool(spec.get(4, 1)),
            add_dummy_prefix=bool(spec.get(3, 1)))
        assert why == "", (name, why)
        assert normalizer.prove(processor.normalize) == "", name
    keys, values = read_charsmap(_charsmap(models["nmt_nfkc"]))
    entries = dict(zip(keys, values))
    assert len(entries) == len(keys) > 200_000  # NFKC's compositions: Hangul, accents
    assert entries["\uff21"] == "A" and entries["\u2026"] == "..." and entries["\n"] == " "
    assert entries["\x01"] == "" and entries["\u1100\u1161"] == "\uac00"
    user, replaced = read_charsmap(_charsmap(models["user rules"]))
    assert dict(zip(user, replaced)) == {"A": "a", "\u00e9": "e\u0301", "\u2603": "",
                                         "\u3000": " ", "\u3042\u3099": "\u3094"}


FRAGMENTS = ["  ", "   ", "\t", "\n", "\r\n", "\x0b", "\x00", "\x01", "\x7f", " ", "\u2581",
             " \u2581", "\u2581 ", "\u3000", "\u00a0", "\u2028", "\x85", "<s>", "</s>",
             "<unk>", "e\u0301", "A\u030a", "\u1100\u1161\u11a8", "\u3042\u3099", "\uff21",
             "\ufb01", "\u2026", "\u00a8", "\u2163", "\u337b", "\u00e9", "\u2603", "A", "Zürich",
             "東京", "😀", "a", "ab", "the", " cat", "123", "\u0130", "\u00df", "\u1e9e"]
# categories the map and the whitespace rules touch: marks (compositions), separators,
# controls, format characters, compatibility letters, symbols and digits
CATEGORIES = ("Mn", "Mc", "Zs", "Zl", "Zp", "Cc", "Cf", "Co", "Lm", "Lo", "Lt", "So", "Sk",
              "Nd", "Nl", "No", "Pd", "Ps")
texts = st.lists(st.one_of(
    st.lists(st.sampled_from(FRAGMENTS), max_size=10).map("".join),
    st.text(st.characters(codec="utf-8"), max_size=20),
    st.text(st.characters(categories=CATEGORIES), max_size=12),
), max_size=12)


@pytest.mark.parametrize("name", list(MODELS))
@settings(max_examples=60, deadline=None)
@given(batch=texts)
@example(batch=["", " ", "\x01", "\u2581", " \u2581 ", "a \u2581", "\x01 \x01", "\u00a8a"])
@example(batch=["e\u0301 x", "\u1100\u1161", "<s> </s> <unk>", "\u3042\u3099", "A\u3000 \u2603"])
def test_normalize_then_encode_equals_sentencepiece(tokenizers, name, batch):
    tokenizer = tokenizers[name]
    ids, lengths = tokenizer.encode_batch(batch)
    assert _split(ids, lengths) == _reference(tokenizer, batch)
    if batch:
        assert tokenizer.encode(batch[0]).tolist() == _reference(tokenizer, batch[:1])[0]


def test_texts_that_might_match_a_longer_key_go_to_sentencepiece(tokenizers):
    normalizer = tokenizers["nmt_nfkc"].block_encoder.normalizer
    batch = ["plain text", "e\u0301", "x\u1100\u1161y", "\u1100 \u1161", "xa\u0301", "b\u0301", ""]
    encoded = [text.encode() for text in batch]
    offsets = np.concatenate([[0], np.cumsum([len(e) for e in encoded])])
    _, _, reference = normalizer.normalize(np.frombuffer(b"".join(encoded), np.uint8),
                                           offsets)
    assert reference.tolist() == [False, True, True, False, True, False, False]
    kept = tokenizers["nmt_nfkc, whitespace kept"].block_encoder.normalizer
    encoded = [b"\x01\x02", b"\x01a", b""]  # emptied by the map: sentencepiece still prefixes
    offsets = np.concatenate([[0], np.cumsum([len(e) for e in encoded])])
    _, _, reference = kept.normalize(np.frombuffer(b"".join(encoded), np.uint8), offsets)
    assert reference.tolist() == [True, False, False]


@pytest.mark.parametrize("rules", list(REFUSED_RULES))
def test_maps_the_proof_does_not_cover_stay_on_sentencepiece(tmp_path, rules):
    path = train(str(tmp_path), rules, {"normalization_rule_tsv": REFUSED_RULES[rules]})
    tokenizer = SentencePieceTokenizer(path)
    assert tokenizer.block_encoder is None
    why = {"ascii second": "a key whose second character is ASCII",
           "two spaces": "two spaces in a row"}[rules]
    assert tokenizer.encoder.startswith("sentencepiece (not gigatoken: ")
    assert why in tokenizer.encoder, tokenizer.encoder
    batch = ["abc ab", "\u2603\u2603 x"]
    assert _split(*tokenizer.encode_batch(batch)) == _reference(tokenizer, batch)


def test_a_model_with_user_defined_symbols_stays_on_sentencepiece(tmp_path):
    """sentencepiece keeps user-defined symbols whole (its normalizer skips them, its
    merging freezes them): the proof does not cover them, so their texts keep its ids."""
    path = train(str(tmp_path), "user symbols", {"user_defined_symbols": ["<sep>", "[MASK]"]})
    tokenizer = SentencePieceTokenizer(path)
    assert tokenizer.block_encoder is None
    assert tokenizer.encoder == ("sentencepiece (not gigatoken: it has user-defined or unused "
                                 "pieces)")
    batch = ["a <sep> b[MASK]c", "<s> x </s>", "\uff21<sep>\u3000"]
    assert _split(*tokenizer.encode_batch(batch)) == _reference(tokenizer, batch)


@pytest.mark.parametrize("damage, why", [
    (lambda blob: blob[:3], "shorter than its 4-byte trie size"),
    (lambda blob: struct.pack("<I", len(blob)) + blob[4:], "does not fit"),
    (lambda blob: struct.pack("<I", 6) + blob[4:], "does not fit"),
    (lambda blob: blob[: struct.unpack_from("<I", blob)[0] + 4] + b"\xff\xfe\x00",
     "not UTF-8|not NUL-ended"),
    (lambda blob: blob[: struct.unpack_from("<I", blob)[0] + 4], "not NUL-ended"),
])
def test_a_damaged_map_is_refused_with_why(models, damage, why):
    blob = damage(_charsmap(models["user rules"]))
    normalizer, reason = Normalizer.build(blob, remove_extra_whitespaces=True,
                                          add_dummy_prefix=True)
    assert normalizer is None
    assert reason.startswith("its character map could not be read ("), reason
    assert re.search(why, reason), reason


def test_a_trie_whose_nodes_point_past_it_is_refused(models):
    blob = bytearray(_charsmap(models["user rules"]))
    size = struct.unpack_from("<I", blob)[0]
    units = np.frombuffer(bytes(blob[4 : 4 + size]), "<u4").copy()
    units[0] |= 0xFFFFFC00 & ~(1 << 31)  # the root's children far past the array
    blob[4 : 4 + size] = units.tobytes()
    with pytest.raises(ValueError, match="past the trie"):
        read_charsmap(bytes(blob))


def test_a_proven_model_loads_its_kept_tables_and_rebuilds_damaged_ones(models,
                                                                        monkeypatch):
    path = models["nmt_nfkc_cf"]
    first = SentencePieceTokenizer(path)  # proven (or read) once in this session's cache
    with open(path, "rb") as stream:
        proto = stream.read()
    key = proof_cache.key(gigatoken_sentencepiece.TABLES, proto, ())
    assert proof_cache.load_payload(key, "normalizer") is not None

    def refuses(self, reference_normalize):
        raise AssertionError("a proven model is not proven again")

    monkeypatch.setattr(Normalizer, "prove", refuses)
    batch = ["Ｈｅｌｌｏ  Wörld\n", "ﬁne…"]
    again = SentencePieceTokenizer(path)
    assert _split(*again.encode_batch(batch)) == _split(*first.encode_batch(batch))
    kept = proof_cache._payload_path(key, "normalizer")
    with open(kept, "r+b") as stream:  # one byte changed: its sha256 no longer matches
        stream.seek(40)
        byte = stream.read(1)
        stream.seek(40)
        stream.write(bytes([byte[0] ^ 1]))
    assert proof_cache.load_payload(key, "normalizer") is None
    rebuilt = SentencePieceTokenizer(path)
    assert _split(*rebuilt.encode_batch(batch)) == _reference(rebuilt, batch)
    assert proof_cache.load_payload(key, "normalizer") is not None


def test_tables_round_trip_and_foreign_bytes_are_refused(tokenizers):
    normalizer = tokenizers["nfkc"].block_encoder.normalizer
    flags = {"remove_extra_whitespaces": True, "add_dummy_prefix": True}
    again = Normalizer.from_tables(normalizer.tables(), **flags)
    batch = ["Ａ\u3000ｂ  c\n", "ﬁ…"]
    assert again.normalize_texts(batch) == normalizer.normalize_texts(batch)
    assert Normalizer.from_tables(b"not an npz", **flags) is None
    stream = io.BytesIO()
    np.savez(stream, ascii=np.zeros(3, np.uint8))
    assert Normalizer.from_tables(stream.getvalue(), **flags) is None
    assert CODE_POINTS == 0x110000


def test_encode_jsonl_reads_lines_as_pythons_json_and_stops_where_a_reader_would(tokenizers):
    """A normalizing encoder's ``encode_jsonl`` (the block protocol; preprocessing takes its
    exact path instead): each line's text normalized then encoded, up to the first line
    that is not an object holding the key as valid Unicode."""
    tokenizer = tokenizers["nmt_nfkc"]
    encoder = tokenizer.block_encoder
    good = ['{"text": "Ｈｅｌｌｏ\\t  world"}', '{"id": 3, "text": "e\\u0301 <s>"}', "",
            '{"text": ""}']
    ids, lengths = encoder.encode_jsonl("\n".join(good).encode() + b"\n", "text")
    texts = ["Ｈｅｌｌｏ\t  world", "e\u0301 <s>", ""]
    assert _split(ids, lengths) == _reference(tokenizer, texts)
    for bad in ('{"text": "lone \\ud800"}', '{"text": 1}', "[1]", "{oops", '{"other": "x"}'):
        block = f'{good[0]}\n{bad}\n{good[1]}\n'.encode()
        assert encoder.encode_jsonl(block, "text")[1].size == 1, bad


def _collapsed_one_by_one(text: str) -> str:
    """sentencepiece's whitespace rule on one replaced text, a character at a time."""
    kept = []
    for char in text:
        if char == " " and (not kept or kept[-1] == " "):
            continue
        kept.append(char)
    return "".join(kept).rstrip(" \u2581")


SPACED = [" ", "  ", "\t", "\u2581", "\u3000", "\u00a0", "a", "é", "東", "\n", "\x00"]


@settings(max_examples=300, deadline=None)
@given(batch=st.lists(st.lists(st.sampled_from(SPACED), max_size=12).map("".join),
                      max_size=8))
@example(batch=[])
@example(batch=["", "", " "])
@example(batch=["a", "b c", "\t\u3000x"])  # nothing to collapse or strip: returned as is
@example(batch=["  a  b  ", "\u2581 \u2581", " \u2581x\u2581 ", "x\u2581\u2581", "   "])
@example(batch=["a ", " b", "c ", "", " d "])  # runs across texts stay cut at each start
def test_the_space_collapse_equals_the_rule_one_character_at_a_time(batch):
    """``_collapse_spaces`` (its mask counted per word, and the texts returned as they are
    when it drops nothing) on runs of spaces, tabs and other spaces, ``▁``, leading and
    trailing spaces, empty texts, and texts beside each other."""
    encoded = [text.encode() for text in batch]
    offsets = np.concatenate([[0], np.cumsum([len(e) for e in encoded])]).astype(np.int64)
    data = np.frombuffer(b"".join(encoded), np.uint8)
    out, moved = sentencepiece_normalizer._collapse_spaces(data, offsets)
    raw = out.tobytes()
    assert moved[0] == 0 and moved[-1] == len(raw)
    got = [raw[moved[i] : moved[i + 1]].decode() for i in range(len(batch))]
    assert got == [_collapsed_one_by_one(text) for text in batch]
    if got == batch:
        assert out is data and moved is offsets


@settings(max_examples=200, deadline=None)
@given(bits=st.lists(st.booleans(), max_size=300), data=st.data())
def test_counts_before_equal_a_cumulative_sum(bits, data):
    size = -(-(len(bits) + 1) // 8) * 8
    mask = np.zeros(size, bool)
    mask[: len(bits)] = bits
    positions = np.asarray(data.draw(st.lists(st.integers(0, size - 1), max_size=20)),
                           np.int64)
    want = np.concatenate([[0], np.cumsum(mask)])[positions]
    assert sentencepiece_normalizer._counts_before(mask, positions).tolist() == want.tolist()
