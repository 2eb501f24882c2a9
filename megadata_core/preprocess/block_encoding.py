"""Tokenizing a block of JSON lines with the tokenizer's native block encoder, exactly.

:func:`tokenize_block` gives the same :class:`TokenizedChunk` as ``tokenize_chunk`` on the
block's lines (the same documents, tokens, blank and bad lines, the same first error),
with no Python per document on the lines ``json_scan`` proves the native reader takes
as Python's ``json`` does: those go to the tokenizer's ``block_encoder`` in one call per
key; the others (invalid or unusual lines) go through the exact path, and both are
merged in line order. A line holding a character the block encoder is not proven on is
read natively too, but its texts, read by Python's ``json``, are encoded by the tokenizer
(``encode_batch``: its reference where it must), and replace that line's native ids. A
tokenizer without a block encoder, or sentence splitting, takes the exact path for the
whole block, as does a block encoder that reads JSON with Python's ``json`` itself
(``reads_json_natively`` false: it must normalize the texts first), whose
``encode_batch`` the exact path then calls.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from typing import Any

import numpy as np

from megadata_core.preprocess import threads
from megadata_core.preprocess.encoding import (
    SentenceSplitter,
    TokenizedChunk,
    Tokenizer,
    assemble_documents,
    encode_many,
    parse_lines,
    tokenize_chunk,
)
from megadata_core.preprocess.json_scan import (
    EMPTY,
    EXACT,
    NATIVE,
    REFERENCE,
    LineScan,
    scan_block,
)
from megadata_core.preprocess.reading import split_lines


def tokenize_block(
    data: bytes,
    tokenizer: Tokenizer,
    json_keys: Sequence[str],
    *,
    path: str = "<input>",
    first_line: int = 1,
    append_eod: bool = False,
    dtype: np.typing.DTypeLike = np.int32,
    skip_bad_lines: bool = False,
    splitter: SentenceSplitter | None = None,
    keep_empty: bool = False,
) -> TokenizedChunk:
    """``tokenize_chunk`` of the lines of ``data`` (a block of whole lines), natively
    where proven exact (see the module docstring)."""
    options: dict[str, Any] = dict(
        path=path, first_line=first_line, append_eod=append_eod, dtype=dtype,
        skip_bad_lines=skip_bad_lines, splitter=splitter, keep_empty=keep_empty,
    )
    native = getattr(tokenizer, "block_encoder", None) if splitter is None else None
    if native is None or not data or not getattr(native, "reads_json_natively", True):
        return tokenize_chunk(split_lines(data), tokenizer, json_keys, **options)
    # the whole block is encoded while it is scanned (the encoder releases the GIL); that
    # result is used when the scan leaves every line to it, as it mostly does
    guesses = [_encoders().submit(native.encode_jsonl, data, key) for key in json_keys]
    scan = scan_block(data, json_keys, native.unproven)
    read = np.flatnonzero((scan.kinds == NATIVE) | (scan.kinds == REFERENCE))  # as Python
    slow = np.flatnonzero(scan.kinds == EXACT)
    parsed = parse_lines(zip(slow.tolist(), _lines(data, scan, slow)), json_keys, path,
                         first_line, skip_bad_lines)  # a bad line raises here, as in tokenize_chunk
    concurrent.futures.wait(guesses)
    # lines holding an unproven character: their texts by the tokenizer (after the guesses:
    # its encoders' instances are free again)
    replaced = _reference_lines(data, scan, tokenizer, json_keys, path, first_line)
    buffer = data if not slow.size else _without(data, scan, slow)
    native_ids = {}
    for key, guess in zip(json_keys, guesses):
        if not read.size:
            ids, lengths = np.zeros(0, np.uint32), np.zeros(0, np.int64)
        elif slow.size:  # some lines are not the native reader's: without them
            ids, lengths = native.encode_jsonl(buffer, key)
        else:
            ids, lengths = guess.result()  # (its error, if any, raised here)
        if lengths.size != read.size or replaced is None:  # the native reader stopped early
            return tokenize_chunk(split_lines(data), tokenizer, json_keys, **options)
        found = (np.asarray(ids).reshape(-1), np.asarray(lengths, np.int64))
        if key in replaced:
            selection = np.arange(read.size)
            rows = np.searchsorted(read, replaced[key][0])
            selection[rows] = read.size + np.arange(rows.size)
            found = merge_documents(selection, found, replaced[key][1])
        native_ids[key] = found
    offsets, order = _line_order(read, np.asarray(parsed.offsets, np.int64))
    last_line = first_line + scan.lines - 1
    tokens, sequence_lengths, document_sequences = {}, {}, {}
    for index, key in enumerate(json_keys):
        ids, lengths = native_ids[key]
        if parsed.texts:
            texts = [document[index] for document in parsed.texts]
            exact_ids, exact_lengths = encode_many(tokenizer, texts, key, path, first_line)
            ids, lengths = merge_documents(order, (ids, lengths), (exact_ids, exact_lengths))
        tokens[key], sequence_lengths[key], document_sequences[key] = assemble_documents(
            ids, lengths, np.ones(lengths.size, np.int64), tokenizer, append_eod,
            np.dtype(dtype), where=(path, first_line, last_line), keep_empty=keep_empty,
        )
    return TokenizedChunk(
        documents=int(offsets.size),
        tokens=tokens,
        sequence_lengths=sequence_lengths,
        document_sequences=document_sequences,
        line_offsets=offsets,
        blank_lines=int((scan.kinds == EMPTY).sum()) + parsed.blank,
        bad_lines=dict(parsed.bad),
        bad_examples=parsed.examples,
    )


def _encoders() -> concurrent.futures.ThreadPoolExecutor:
    """The threads that encode whole blocks beside their scans (two per block thread: one
    block of two keys at a time each; more keys queue)."""
    return threads.shared_pool("megadata-encode", 2 * threads.threads_for_native())


def _lines(data: bytes, scan: LineScan, rows: np.ndarray) -> list[bytes]:
    """The lines at ``rows`` (each with its newline, as split_lines gives them)."""
    return [data[scan.starts[i] : scan.ends[i] + 1] for i in rows.tolist()]


def _reference_lines(data: bytes, scan: LineScan, tokenizer: Tokenizer,
                     json_keys: Sequence[str], path: str, first_line: int):
    """key -> (the REFERENCE lines, (ids, lengths) of their texts by the tokenizer's own
    encoding), or None if Python's json does not read them all (not expected: the scan
    proved them)."""
    rows = np.flatnonzero(scan.kinds == REFERENCE)
    if not rows.size:
        return {}
    parsed = parse_lines(zip(rows.tolist(), _lines(data, scan, rows)), json_keys, path,
                         first_line, skip_bad_lines=True)
    if len(parsed.texts) != rows.size:
        return None
    return {key: (rows, encode_many(tokenizer, [document[index] for document in parsed.texts],
                                    key, path, first_line))
            for index, key in enumerate(json_keys)}


def _without(data: bytes, scan, slow: np.ndarray) -> bytes:
    """``data`` without the lines at ``slow`` (each run of kept lines copied once)."""
    view = memoryview(data)
    pieces = []
    start = 0
    for line in slow.tolist():  # one slice per line left to Python (few)
        pieces.append(view[start : scan.starts[line]])
        start = min(int(scan.ends[line]) + 1, len(data))
    pieces.append(view[start:])
    return b"".join(pieces)


def _line_order(fast: np.ndarray, slow: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(every document's line offset in order, the permutation that puts the native
    documents then the exact ones in that order)."""
    offsets = np.concatenate([fast, slow])
    order = np.argsort(offsets, kind="stable")
    return offsets[order], order


def merge_documents(order: np.ndarray, *parts: tuple[np.ndarray, np.ndarray]):
    """Documents of ``parts`` (ids, lengths each), concatenated, then those at ``order``
    (a permutation, or a selection) in its order: one gather of the ids."""
    ids = np.concatenate([np.asarray(part[0], np.int64) for part in parts])
    lengths = np.concatenate([part[1] for part in parts])
    starts = np.cumsum(lengths) - lengths
    lengths = lengths[order]
    starts = starts[order]
    out_starts = np.cumsum(lengths) - lengths
    index = np.repeat(starts - out_starts, lengths) + np.arange(int(lengths.sum()))
    return ids[index], lengths
