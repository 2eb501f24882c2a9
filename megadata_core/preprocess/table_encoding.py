"""Tokenizing rows of a table (a parquet row group): string columns to token arrays.

The columns come as stored (UTF-8 bytes and offsets, ``plan.TableReader.read_buffers``);
with the tokenizer's block encoder the texts go to it in one call per column, without a
Python string per row, but for the rows ``json_scan.exact_rows`` sends to the exact path
(invalid UTF-8, unproven characters), which are decoded and encoded by ``encode_batch``.
A row where a column is null is a bad line (``not_string``), as the JSON path reports a
key that holds null.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from megadata_core.errors import DataError
from megadata_core.preprocess.block_encoding import merge_documents
from megadata_core.preprocess.encoding import (
    BadLineError,
    SentenceSplitter,
    TokenizedChunk,
    Tokenizer,
    assemble_documents,
    encode_columns,
    encode_many,
)
from megadata_core.preprocess.json_scan import exact_rows


def tokenize_rows(
    buffers: Sequence[tuple[np.ndarray, np.ndarray]],
    valid: np.ndarray,
    tokenizer: Tokenizer,
    json_keys: Sequence[str],
    *,
    where: str,
    first_row: int = 0,
    append_eod: bool = False,
    dtype: np.typing.DTypeLike = np.int32,
    skip_bad_lines: bool = False,
    splitter: SentenceSplitter | None = None,
    keep_empty: bool = False,
) -> TokenizedChunk:
    """Rows ``first_row`` + [0, len(valid)) of a table (``where`` names it in messages),
    one (data, offsets) per key over exactly those rows; ``valid[i]``: no column is null."""
    rows = int(valid.size)
    kept = np.flatnonzero(valid)
    bad, examples = {}, []
    if kept.size < rows:
        null = int(np.flatnonzero(~valid)[0])
        error = BadLineError(f"{where}, row {first_row + null + 1}: a key of "
                             f"{list(json_keys)} holds null, not a string", "not_string")
        if not skip_bad_lines:
            raise error
        bad, examples = {"not_string": rows - int(kept.size)}, [str(error)]
    native = getattr(tokenizer, "block_encoder", None) if splitter is None else None
    last = first_row + rows
    options: dict[str, Any] = dict(
        append_eod=append_eod, dtype=np.dtype(dtype), keep_empty=keep_empty
    )
    tokens: dict = {}
    lengths: dict = {}
    sequences: dict = {}
    if native is None:
        columns = [_texts(data, offsets, kept, where, first_row) for data, offsets in buffers]
        tokens, lengths, sequences = encode_columns(
            columns, tokenizer, json_keys, path=where, first_line=first_row + 1,
            last_line=last, splitter=splitter, **options)
    else:
        for key, (data, offsets) in zip(json_keys, buffers):
            exact = exact_rows(data, offsets, native.unproven)[kept]
            fast = kept[~exact]
            ids, counts = native.encode_utf8(*_select(data, offsets, fast, rows))
            if exact.any():
                texts = _texts(data, offsets, kept[exact], where, first_row)
                order = np.argsort(np.concatenate([fast, kept[exact]]), kind="stable")
                ids, counts = merge_documents(
                    order, (ids, counts), encode_many(tokenizer, texts, key, where, first_row + 1))
            tokens[key], lengths[key], sequences[key] = assemble_documents(
                ids, np.asarray(counts, np.int64), np.ones(kept.size, np.int64), tokenizer,
                where=(where, first_row + 1, last), **options)
    part = TokenizedChunk(
        documents=int(kept.size), tokens=tokens, sequence_lengths=lengths,
        document_sequences=sequences, line_offsets=kept.astype(np.int64), bad_lines=bad,
        bad_examples=examples,
    )
    part.nbytes = sum(_text_bytes(offsets, kept) for _, offsets in buffers)
    return part


def _text_bytes(offsets: np.ndarray, rows: np.ndarray) -> int:
    return int((offsets[rows + 1] - offsets[rows]).sum())


def _select(data, offsets, rows: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """(data, offsets) of the texts at ``rows`` (sorted) only (the column itself when all):
    one boolean mask over the bytes, so the cost is a pass over them, not an int64 index
    per byte."""
    if rows.size == total:
        return data, offsets
    lengths = np.diff(offsets)
    keep = np.zeros(total, bool)
    keep[rows] = True
    text = np.asarray(data)[int(offsets[0]) : int(offsets[-1])]
    out = np.zeros(rows.size + 1, np.int64)
    np.cumsum(lengths[rows], out=out[1:])
    return text[np.repeat(keep, lengths)], out


def _texts(data, offsets, rows: np.ndarray, where: str, first_row: int) -> list[str]:
    """Python strings of the texts at ``rows`` (the exact path)."""
    texts = []
    # numpy types ndarray.__buffer__ for Python 3.12+ only:
    raw = memoryview(np.ascontiguousarray(data))  # type: ignore[arg-type]
    for row in rows.tolist():
        try:
            texts.append(str(raw[offsets[row] : offsets[row + 1]], "utf-8"))
        except UnicodeDecodeError as error:
            raise DataError(f"{where}, row {first_row + row + 1}: invalid UTF-8 at byte "
                            f"{error.start} ({error.reason})") from None
    return texts
