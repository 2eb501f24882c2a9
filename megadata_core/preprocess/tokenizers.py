"""The tokenizer protocol preprocessing needs, and a byte-level tokenizer for tests and demos."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Tokenizer(Protocol):
    """What preprocessing needs from a tokenizer."""

    eod_id: int
    vocab_size: int

    def encode(self, text: str) -> Sequence[int] | np.ndarray:
        """Token ids of ``text`` (1-D, integers in ``[0, vocab_size)``).

        A tokenizer may also have ``encode_batch(texts) -> (ids, lengths)``: every
        text's ids concatenated and int64[len(texts)] lengths, used when present, and a
        ``block_encoder`` (a :class:`BlockEncoder`, or None), used for whole blocks.
        """
        ...


@runtime_checkable
class BlockEncoder(Protocol):
    """A native encoder of whole blocks, giving exactly the ids of its tokenizer's
    ``encode`` for every text without a character in ``unproven``.

    ``unproven``: int64 [k, 2] sorted, disjoint code point ranges [start, stop) where that
    is not proven; texts holding one go through the tokenizer's ``encode_batch`` instead.
    An encoder may set ``reads_json_natively = False`` when its ``encode_jsonl`` parses
    with Python's ``json`` (then blocks take the exact path, without the native scan).
    """

    unproven: np.ndarray

    def encode_jsonl(self, block: bytes, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(ids, int64 lengths) of ``key``'s text on each non-empty line of ``block``, a
        JSON-lines block whose every such line is an object holding ``key`` once, as a
        string (``json_scan`` proves that first); fewer lengths than lines when the native
        reader stops early."""
        ...

    def encode_utf8(self, data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ids, int64 lengths) of the texts ``data[offsets[i]:offsets[i + 1]]`` (uint8
        UTF-8, int64 offsets), as a string column of a table holds them."""
        ...


@runtime_checkable
class SentenceSplitter(Protocol):
    """What ``--split-sentences`` needs: a text's sentences, in order."""

    def split(self, text: str) -> list[str]: ...


class ByteTokenizer:
    """UTF-8 bytes as tokens: ids 0..255 are bytes, 256 is EOD (vocab_size 257)."""

    vocab_size = 257
    eod_id = 256

    def encode(self, text: str) -> np.ndarray:
        """uint8[len(text.encode('utf-8'))]; UnicodeEncodeError on lone surrogates."""
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)

    def decode(self, tokens: Sequence[int] | np.ndarray) -> str:
        """Text of byte tokens; ids >= 256 (EOD) are dropped, bad UTF-8 is replaced."""
        array = np.asarray(tokens).reshape(-1)
        return array[array < 256].astype(np.uint8).tobytes().decode("utf-8", "replace")

    def __repr__(self) -> str:
        return "ByteTokenizer()"

