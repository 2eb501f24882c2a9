"""Text tokenizers for preprocessing: HuggingFace ``tokenizers`` and ``tiktoken``.

Both load from local files only; nothing here ever downloads. Each class meets
``megadata_core.preprocess.Tokenizer`` (``encode``, ``eod_id``, ``vocab_size``).
Worker processes build their own tokenizer from a picklable factory::

    factory = functools.partial(load_tokenizer, "huggingface", "tokenizer.json")
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from megadata_core.errors import DataError
from megadata_core.preprocess import ByteTokenizer

__all__ = [
    "DEFAULT_SPLIT_PATTERN",
    "EOD_CANDIDATES",
    "HuggingFaceTokenizer",
    "TiktokenTokenizer",
    "load_tokenizer",
]

# Tried in order when no eod_token is named.
EOD_CANDIDATES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>")

# GPT-4 style pre-tokenization: contractions, letter runs with one leading
# non-letter, numbers of up to 3 digits, punctuation runs, newlines, spaces.
DEFAULT_SPLIT_PATTERN = "|".join(
    [
        r"'(?i:[sdmt]|ll|ve|re)",
        r"[^\r\n\p{L}\p{N}]?+\p{L}+",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]++[\r\n]*",
        r"\s*[\r\n]",
        r"\s+(?!\S)",
        r"\s+",
    ]
)


def _local_file(path, what: str) -> str:
    """``path`` as a string naming an existing local file (URLs are refused: no downloads)."""
    if path is None:
        raise DataError(f"{what}: a tokenizer file path is required")
    path = os.fspath(path)
    if "://" in path:
        raise DataError(f"{path}: {what} must be a local file; downloading is not supported")
    if not os.path.isfile(path):
        raise DataError(f"{path}: {what} file not found")
    return path


class HuggingFaceTokenizer:
    """A ``tokenizer.json`` read by the ``tokenizers`` library.

    ``encode(text)`` -> int64[n] ids without added special tokens; ``eod_id`` is
    ``eod_token``'s id, or that of the first of EOD_CANDIDATES in the vocabulary.
    """

    def __init__(self, path: str, eod_token: str | None = None) -> None:
        from tokenizers import Tokenizer as _HFTokenizer

        self.path = _local_file(path, "huggingface tokenizer")
        try:
            self._tokenizer = _HFTokenizer.from_file(self.path)
        except Exception as error:  # tokenizers raises its own Exception type
            raise DataError(f"{self.path}: not a readable tokenizer.json: {error}") from error
        # ids run up to the largest in the vocabulary, even when added tokens leave holes
        largest = max(self._tokenizer.get_vocab(with_added_tokens=True).values(), default=-1)
        self.vocab_size = max(self._tokenizer.get_vocab_size(with_added_tokens=True), largest + 1)
        names = [eod_token] if eod_token is not None else list(EOD_CANDIDATES)
        for name in names:
            token_id = self._tokenizer.token_to_id(name)
            if token_id is not None:
                self.eod_token, self.eod_id = name, int(token_id)
                break
        else:
            if eod_token is not None:
                raise DataError(f"{self.path}: eod_token {eod_token!r} is not in the vocabulary")
            raise DataError(
                f"{self.path}: no end-of-document token found (tried {', '.join(names)}); "
                "name one with eod_token"
            )

    def encode(self, text: str) -> np.ndarray:
        """int64[n] token ids of ``text``."""
        ids = self._tokenizer.encode(text, add_special_tokens=False).ids
        return np.array(ids, dtype=np.int64)

    def decode(self, ids) -> str:
        return self._tokenizer.decode([int(i) for i in np.asarray(ids).reshape(-1)])

    def __repr__(self) -> str:
        return f"HuggingFaceTokenizer({self.path!r}, eod_token={self.eod_token!r})"


class TiktokenTokenizer:
    """A tiktoken BPE ranks file (lines ``base64(token) rank``) from a local path.

    The ranks must cover all 256 single bytes and be 0..n-1; the EOD token is a
    special token with id n, so ``vocab_size`` is n + 1. ``encode(text)`` ->
    uint32[k] ids, special-token strings in the text encoded as ordinary text.
    """

    def __init__(
        self,
        path: str,
        pattern: str | None = None,
        eod_token: str = "<|endoftext|>",
    ) -> None:
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe

        self.path = os.path.abspath(_local_file(path, "tiktoken BPE"))
        with open(self.path, "rb") as stream:
            digest = hashlib.sha256(stream.read()).hexdigest()
        try:
            # tiktoken caches files by path; the hash makes a stale cached copy re-read
            ranks = load_tiktoken_bpe(self.path, expected_hash=digest)
        except ValueError as error:
            raise DataError(f"{self.path}: not a tiktoken BPE file: {error}") from error
        if not ranks:
            raise DataError(f"{self.path}: no ranks in the BPE file")
        values = np.fromiter(ranks.values(), dtype=np.int64, count=len(ranks))
        if values.min() != 0 or values.max() != len(ranks) - 1 or np.unique(values).size != len(
            ranks
        ):
            raise DataError(
                f"{self.path}: ranks must be 0..{len(ranks) - 1} without gaps or repeats "
                f"(found {values.min()}..{values.max()})"
            )
        missing = [b for b in range(256) if bytes([b]) not in ranks]
        if missing:
            raise DataError(
                f"{self.path}: {len(missing)} single bytes have no rank (first: {missing[0]}); "
                "byte-level BPE needs all 256"
            )
        self.eod_token = eod_token
        self.eod_id = len(ranks)
        self.vocab_size = len(ranks) + 1
        self.pattern = DEFAULT_SPLIT_PATTERN if pattern is None else pattern
        self._encoding = tiktoken.Encoding(
            name=f"megadata:{os.path.basename(self.path)}",
            pat_str=self.pattern,
            mergeable_ranks=ranks,
            special_tokens={eod_token: self.eod_id},
        )

    def encode(self, text: str) -> np.ndarray:
        """uint32[n] token ids of ``text`` (no special tokens recognized)."""
        return self._encoding.encode_to_numpy(text, disallowed_special=())

    def decode(self, ids) -> str:
        return self._encoding.decode([int(i) for i in np.asarray(ids).reshape(-1)])

    def __repr__(self) -> str:
        return f"TiktokenTokenizer({self.path!r}, eod_token={self.eod_token!r})"


def load_tokenizer(kind: str, path: str | None = None, **options):
    """A tokenizer by kind: ``"bytes"``, ``"huggingface"`` or ``"tiktoken"``.

    ``functools.partial(load_tokenizer, kind, path, **options)`` is a picklable
    factory for ``megadata_core.preprocess.preprocess_jsonl``.
    """
    if kind == "bytes":
        if options:
            raise DataError(f"tokenizer 'bytes' takes no options, got {sorted(options)}")
        return ByteTokenizer()
    if kind == "huggingface":
        return HuggingFaceTokenizer(path, **options)
    if kind == "tiktoken":
        return TiktokenTokenizer(path, **options)
    raise DataError(f"tokenizer_type: {kind!r} is not one of 'bytes', 'huggingface', 'tiktoken'")
