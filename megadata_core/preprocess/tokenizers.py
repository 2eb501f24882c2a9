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
        text's ids concatenated and int64[len(texts)] lengths, used when present.
        """
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

