"""gigatoken for SentencePiece BPE models (``SentencePieceTokenizer``,
``GPTSentencePieceTokenizer``, ``Llama2Tokenizer``), wherever its ids are proven
sentencepiece's; :func:`sentencepiece` returns ``(encoder, "")`` or ``(None, why)``.

sentencepiece normalizes the text (its character map, extra-whitespace removal, the
dummy prefix, spaces escaped as ``▁``), then merges, over the characters of the whole
normalized text, the adjacent pair whose concatenation is a normal piece of the highest
score (the leftmost of equals), then spells every symbol that is not a piece in byte
pieces. That is rank merging with rank = -score, so the byte-level proof gives its ids
to pair merging over *canonical* merges: for each normal piece (by falling score) the
pair that rank merging of its own characters joins last. Conditions: a BPE model with
byte fallback and all 256 byte pieces, whitespace escaped as a prefix, no user-defined
or unused pieces, distinct scores, every character of a piece a piece; gigatoken is
given a ``tokenizer.json`` without added tokens (sentencepiece's ``encode`` does not
split control pieces out of the text, so ``<s>`` in a text is text).

The normalization: a model without a character map and without extra-whitespace
removal (``normalization_rule_name=identity``, ``remove_extra_whitespaces=false``) only
prefixes and escapes, which gigatoken's ``Prepend`` and ``Replace`` do. Any other model
(``nmt_nfkc``, ``nfkc``, ``nmt_nfkc_cf``, ``nfkc_cf``, a user's rule table) is normalized
by ``megadata_adapters.tokenizing.sentencepiece_normalizer`` first, as array operations
whose proof covers the model's character map entry by entry (its docstring); the texts
it cannot normalize exactly that way go to sentencepiece, and gigatoken then prefixes,
escapes and merges. gigatoken's own normalizer for such models (``from_sentencepiece``:
a grapheme-wise character map, Unicode whitespace stripped, spaces collapsed) is not
used: it is not sentencepiece's.

Every proof ends with gigatoken handing back the merges given and a battery of hard
texts (with the model's control pieces as text) encoded the same as by sentencepiece.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
import struct
from collections.abc import Iterator, Mapping

import numpy as np

from megadata_adapters.tokenizing import proof_cache
from megadata_adapters.tokenizing.gigatoken_encoders import (
    GigaEncoder,
    available,
    battery,
    load_config,
)
from megadata_adapters.tokenizing.sentencepiece_normalizer import Normalizer

__all__ = ["canonical_merges", "normalizes", "sentencepiece"]

_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6
_BYTE_PIECE = re.compile(r"<0x[0-9A-F]{2}>")


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: ints for varints, bytes otherwise."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 1:
            value, at = data[at : at + 8], at + 8
        elif wire == 2:
            length, at = _varint(data, at)
            value, at = data[at : at + length], at + length
        elif wire == 5:
            value, at = data[at : at + 4], at + 4
        else:
            raise ValueError(f"protobuf wire type {wire}")
        yield field, value


def _piece(message: bytes) -> tuple[str, float, int]:
    """(text, score, type) of a SentencePiece message (fields 1, 2, 3, usually in order)."""
    if message[:1] == b"\x0a" and message[1] < 0x80:  # text of under 128 bytes, first
        end = 2 + message[1]
        if message[end : end + 1] == b"\x15" and len(message) in (end + 5, end + 7):
            score = struct.unpack_from("<f", message, end + 1)[0]
            kind = message[end + 6] if len(message) == end + 7 else _NORMAL
            if len(message) == end + 5 or message[end + 5] == 0x18:
                return message[2:end].decode("utf-8"), score, kind
    entry = dict(_fields(message))
    score = struct.unpack("<f", entry.get(2, b"\0\0\0\0"))[0]
    return entry.get(1, b"").decode("utf-8"), score, entry.get(3, _NORMAL)


def _model(proto: bytes) -> tuple[list[tuple[str, float, int]], dict, dict]:
    """(pieces as (text, score, type), trainer spec fields, normalizer spec fields)."""
    pieces, trainer, normalizer = [], {}, {}
    for field, value in _fields(proto):
        if field == 1:
            pieces.append(_piece(value))
        elif field == 2:
            trainer = dict(_fields(value))
        elif field == 3:
            normalizer = dict(_fields(value))
    return pieces, trainer, normalizer


def sentencepiece(proto: bytes, reference, reference_batch=None, reference_normalize=None, *,
                  proven: bool = False) -> tuple[GigaEncoder | None, str]:
    """gigatoken for a SentencePiece ``.model`` (its bytes) when the conditions of the
    module docstring hold: ``reference(text) -> ids`` is sentencepiece's ``encode``,
    ``reference_batch(texts) -> (ids, lengths)`` its batch (the texts the normalizer
    leaves to it) and ``reference_normalize(texts) -> texts`` its ``normalize``; both are
    needed by a model that normalizes. ``proven``: a proof passed before for the same
    bytes and library versions (``proof_cache``): gigatoken and the normalizer are loaded,
    the checks skipped."""
    why = available()
    if why:
        return None, why
    cache_key = proof_cache.key(TABLES, proto, ())
    kept = proof_cache.load_payload(cache_key, "config") if proven else None
    if kept is not None:  # the tokenizer.json this proof gave gigatoken, as written
        config, spec, pieces, merges = kept.decode("utf-8"), _normalizer_spec(proto), [], []
    else:
        found = _sentencepiece_model(hashlib.sha256(proto).hexdigest(), proto, not proven)
        if isinstance(found, str):
            return None, found
        pieces, spec, merges = found
        config = json.dumps(_config(pieces, spec, merges), ensure_ascii=False)
    normalizer, proof = None, SENTENCEPIECE_PROOF
    if normalizes(spec):
        if reference_normalize is None or reference_batch is None:
            return None, "it normalizes text, and no reference normalizer was given"
        normalizer, why = _normalizer(proto, spec, None if proven else reference_normalize)
        if normalizer is None:
            return None, why
        proof = f"{SENTENCEPIECE_PROOF}; its normalizer ({_rule(spec)}) as array operations"
    tokenizer, why = load_config(config, "SentencePieceTokenizer")
    if tokenizer is None:
        return None, why
    encoder = GigaEncoder(tokenizer, np.zeros((0, 2), np.int64), proof, "config", config,
                          "SentencePieceTokenizer", normalizer=normalizer,
                          reference_batch=reference_batch)
    if not proven:
        expected = [(left.encode(), right.encode()) for left, right in merges]
        if tokenizer.merges != expected:
            return None, "gigatoken read other merges"
        why = battery(encoder, reference, extra=_special_texts(pieces))
        if why:
            return None, why
    if kept is None:
        proof_cache.store_payload(cache_key, "config", config.encode("utf-8"))
    return encoder, ""


def _normalizer_spec(proto: bytes) -> dict:
    """The normalizer spec fields of a model (its top-level field 3), pieces skipped."""
    for field, value in _fields(proto):
        if field == 3:
            return dict(_fields(value))  # type: ignore[arg-type]
    return {}


SENTENCEPIECE_PROOF = "SentencePiece BPE over canonical merges: same ids as sentencepiece"
TABLES = "sentencepiece-tables-1"  # what a proof keeps beside its verdict (proof_cache)


def _normalizer(proto: bytes, spec: dict, reference_normalize) -> tuple[Normalizer | None, str]:
    """The model's normalizer proven against ``reference_normalize``, or, when that is None
    (a proof passed before), read from the tables the proof kept (built again when
    there are none)."""
    flags = {"remove_extra_whitespaces": bool(spec.get(4, 1)),
             "add_dummy_prefix": bool(spec.get(3, 1))}
    cache_key = proof_cache.key(TABLES, proto, ())
    if reference_normalize is None:
        kept = proof_cache.load_payload(cache_key, "normalizer")
        normalizer = None if kept is None else Normalizer.from_tables(kept, **flags)
        if normalizer is not None:
            return normalizer, ""
    normalizer, why = Normalizer.build(spec.get(2, b""), **flags)
    if normalizer is None:
        return None, why
    if reference_normalize is not None:
        why = normalizer.prove(reference_normalize)
        if why:
            return None, why
    proof_cache.store_payload(cache_key, "normalizer", normalizer.tables())
    return normalizer, ""


def normalizes(spec: dict) -> bool:
    """Whether a model's normalizer spec changes text beyond the space escape and prefix:
    a character map, or extra-whitespace removal."""
    return bool(spec.get(2, b"")) or bool(spec.get(4, 1))


def _rule(spec: dict) -> str:
    name = spec.get(1, b"").decode("utf-8", "replace") or "a character map"
    return name + (", extra whitespace removed" if spec.get(4, 1) else "")


def _special_texts(pieces) -> list[str]:
    """Texts holding the control and unknown pieces' text (sentencepiece's ``encode``
    encodes them as text, not as those pieces)."""
    marks = [piece for piece, _, kind in pieces if kind in (_CONTROL, _UNKNOWN)][:8]
    return [*marks, " ".join(marks), "".join(marks) + " x", f"a{''.join(marks)}b"]


def _config(pieces, spec: dict, merges) -> dict:
    """The ``tokenizer.json`` dict gigatoken is given for a SentencePiece model: its
    normalized text (this module's :class:`Normalizer` for a model that normalizes) gets
    the dummy prefix and escaped spaces, then BPE over the canonical merges."""
    rules = [{"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]
    if spec.get(3, 1):  # add_dummy_prefix
        rules.insert(0, {"type": "Prepend", "prepend": "\u2581"})
    return {
        "version": "1.0",
        "added_tokens": [],  # sentencepiece's encode does not split control pieces out
        "normalizer": {"type": "Sequence", "normalizers": rules},
        "pre_tokenizer": None,
        "model": {"type": "BPE", "byte_fallback": True, "fuse_unk": True, "dropout": None,
                  "unk_token": next((p for p, _, t in pieces if t == _UNKNOWN), None),
                  "vocab": {piece: i for i, (piece, _, _) in enumerate(pieces)},
                  "merges": [list(pair) for pair in merges]},
    }


@functools.lru_cache(maxsize=8)
def _sentencepiece_model(digest: str, proto: bytes, check: bool = True):
    """(pieces, normalizer spec, canonical merges) of a model, or why the proof does not
    cover it; kept per process by content (``digest``): workers inherit it. ``check``:
    run the merges' check through ``tokenizers`` (skipped for a cached proof)."""
    try:
        pieces, trainer, normalizer = _model(proto)
    except (ValueError, IndexError, UnicodeDecodeError, struct.error) as error:
        return f"its model could not be read ({error})"
    why = _sentencepiece_spec(pieces, trainer, normalizer)
    if why:
        return why
    cache_key = proof_cache.key(TABLES, proto, ())
    kept = None if check else proof_cache.load_payload(cache_key, "merges")
    if kept is not None:
        with contextlib.suppress(ValueError):
            merges = [(left, right) for left, right in json.loads(kept)]
            return pieces, normalizer, merges
    merges, why = canonical_merges(pieces, check)
    if merges is None:
        return why
    proof_cache.store_payload(cache_key, "merges", json.dumps(merges).encode())
    return pieces, normalizer, merges


def _sentencepiece_spec(pieces, trainer: dict, normalizer: dict) -> str:
    """'' when the model is one the proof covers, else why not."""
    if trainer.get(3, 1) != 2:
        return "it is not a BPE model"
    if not trainer.get(35, 0):
        return "it has no byte fallback"
    if trainer.get(24, 0):
        return "it treats whitespace as a suffix"
    if not normalizer.get(5, 1):
        return "it does not escape whitespace"
    types = {kind for _, _, kind in pieces}
    if types & {_USER_DEFINED, _UNUSED}:
        return "it has user-defined or unused pieces"
    bytes_found = {piece for piece, _, kind in pieces if kind == _BYTE}
    if bytes_found != {f"<0x{b:02X}>" for b in range(256)}:
        return "it lacks some of the 256 byte pieces"
    if any(_BYTE_PIECE.fullmatch(piece) for piece, _, kind in pieces if kind != _BYTE):
        return "a piece that is not a byte piece is spelled like one"
    return ""


def canonical_merges(pieces, check: bool = True) -> tuple[list[tuple[str, str]] | None, str]:
    """(merges, "") for SentencePiece ``pieces`` (text, score, type): for each normal piece
    of two or more characters, by falling score, the pair that sentencepiece's merging of
    its own characters joins last (pieces it cannot reach are left out); or (None, why)."""
    normal = [(piece, score) for piece, score, kind in pieces if kind == _NORMAL]
    score = dict(normal)
    singles = {piece for piece in score if len(piece) == 1}
    longer = sorted((piece for piece in score if len(piece) > 1), key=lambda p: -score[p])
    values = [score[piece] for piece in longer]
    if len(set(values)) != len(values):
        return None, "two pieces share a score"
    merges = []
    for piece in longer:
        if len(piece) == 2:
            if piece[0] not in singles or piece[1] not in singles:
                return None, f"piece {piece!r} holds a character that is no piece"
            merges.append((piece[0], piece[1]))
            continue
        limit = score[piece]
        symbols = list(piece)
        while len(symbols) > 2:  # sentencepiece's merging, pieces scored above this one
            best, best_score = -1, limit
            for i in range(len(symbols) - 1):
                found = score.get(symbols[i] + symbols[i + 1])
                if found is not None and found > best_score:
                    best, best_score = i, found
            if best < 0:
                break
            symbols[best : best + 2] = [symbols[best] + symbols[best + 1]]
        if len(symbols) != 2:
            continue  # never made: its characters merge otherwise
        missing = set(piece) - singles
        if missing:
            return None, f"piece {piece!r} holds {sorted(missing)[0]!r}, which is no piece"
        merges.append((symbols[0], symbols[1]))
    if check and not _pair_merging_keeps_whole(score, merges):
        return None, "some piece is not merged whole from its characters"
    return merges, ""


def _pair_merging_keeps_whole(score: Mapping[str, float], merges) -> bool:
    """Condition 3: pair merging (the ``tokenizers`` BPE model) gives each merge result
    as one token."""
    if not merges:
        return True
    from tokenizers import Tokenizer, models

    vocab = {piece: i for i, piece in enumerate(score)}
    model = models.BPE(vocab=vocab, merges=[tuple(pair) for pair in merges])
    results = [left + right for left, right in merges]
    encodings = Tokenizer(model).encode_batch_fast(results, add_special_tokens=False)
    return all(e.ids == [vocab[r]] for e, r in zip(encodings, results))
