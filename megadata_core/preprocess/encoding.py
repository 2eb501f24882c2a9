"""Tokenizing a chunk of consecutive lines into concatenated token arrays, per key."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from megadata_core.errors import DataError
from megadata_core.preprocess.records import BadLineError, encode_text, parse_record
from megadata_core.preprocess.tokenizers import Tokenizer

MAX_EXAMPLES = 10  # bad-line messages kept per chunk and in the summary


@dataclass
class TokenizedChunk:
    """Tokens of consecutive lines, per key.

    ``tokens[key]``: 1-D array of the output dtype, every document's tokens
    concatenated; ``lengths[key]``: int64[documents], tokens per document
    (EOD included; 0 means a document with zero sequences).
    """

    documents: int
    tokens: dict[str, np.ndarray]
    lengths: dict[str, np.ndarray]
    blank_lines: int = 0
    bad_lines: dict[str, int] = field(default_factory=dict)
    bad_examples: list[str] = field(default_factory=list)


def tokenize_chunk(
    lines: Sequence[bytes],
    tokenizer: Tokenizer,
    json_keys: Sequence[str],
    *,
    path: str = "<input>",
    first_line: int = 1,
    append_eod: bool = False,
    dtype: np.typing.DTypeLike = np.int32,
    skip_bad_lines: bool = False,
) -> TokenizedChunk:
    """Tokenize raw JSON-lines ``lines`` (line ``first_line + i`` of ``path``).

    Blank lines are skipped; a bad line raises BadLineError, or is counted by
    kind when ``skip_bad_lines``. Loops once per line, never per token.
    """
    pieces: dict[str, list[np.ndarray]] = {key: [] for key in json_keys}
    lengths: dict[str, list[int]] = {key: [] for key in json_keys}
    eod = np.array([tokenizer.eod_id], dtype=np.int64)
    documents = blank = 0
    bad: collections.Counter[str] = collections.Counter()
    examples: list[str] = []
    for offset, line in enumerate(lines):
        if not line.strip():
            blank += 1
            continue
        line_number = first_line + offset
        try:
            texts = parse_record(line, json_keys, path, line_number)
            encoded = [
                encode_text(tokenizer, text, key, path, line_number)
                for key, text in zip(json_keys, texts)
            ]
        except BadLineError as error:
            if not skip_bad_lines:
                raise
            bad[error.kind] += 1
            if len(examples) < MAX_EXAMPLES:
                examples.append(str(error))
            continue
        documents += 1
        for key, ids in zip(json_keys, encoded):
            if ids.size == 0:  # Megatron: no sentence, hence no EOD either
                lengths[key].append(0)
                continue
            pieces[key].append(ids)
            if append_eod:
                pieces[key].append(eod)
            lengths[key].append(ids.size + int(append_eod))
    last_line = first_line + len(lines) - 1
    tokens = {
        key: _as_token_dtype(pieces[key], np.dtype(dtype), path, first_line, last_line)
        for key in json_keys
    }
    return TokenizedChunk(
        documents=documents,
        tokens=tokens,
        lengths={key: np.asarray(lengths[key], dtype=np.int64) for key in json_keys},
        blank_lines=blank,
        bad_lines=dict(bad),
        bad_examples=examples,
    )


def _as_token_dtype(
    pieces: list[np.ndarray], dtype: np.dtype, path: str, first: int, last: int
) -> np.ndarray:
    """Concatenate id arrays into ``dtype``, checking the ids fit (one pass, vectorized)."""
    if not pieces:
        return np.empty(0, dtype=dtype)
    ids = np.concatenate(pieces)
    info = np.iinfo(dtype)
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high > info.max:
        bad = low if low < 0 else high
        raise DataError(
            f"{path}, lines {first}-{last}: the tokenizer produced id {bad}, outside "
            f"[0, {info.max}] of the output dtype {dtype} (is vocab_size right?)"
        )
    return ids.astype(dtype, copy=False)

