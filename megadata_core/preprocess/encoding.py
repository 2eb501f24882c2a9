"""Tokenizing a chunk of consecutive lines into concatenated token arrays, per key: the
exact path (Python's ``json`` per line, the tokenizer's ``encode_batch``)."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from megadata_core.errors import DataError
from megadata_core.preprocess.records import (
    BadLineError,
    check_unicode,
    encode_many,
    parse_record,
)
from megadata_core.preprocess.tokenizers import SentenceSplitter, Tokenizer

MAX_EXAMPLES = 10  # bad-line messages kept per chunk and in the summary


@dataclass
class TokenizedChunk:
    """Tokens of consecutive lines, per key.

    ``tokens[key]``: 1-D array of the output dtype, every sequence concatenated;
    ``sequence_lengths[key]``: int64[sequences] (EOD included in a document's last);
    ``document_sequences[key]``: int64[documents], sequences per document (0 for a
    text that tokenizes to nothing); ``line_offsets``: int64[documents], each
    document's line within the chunk (0-based).
    """

    documents: int
    tokens: dict[str, np.ndarray]
    sequence_lengths: dict[str, np.ndarray]
    document_sequences: dict[str, np.ndarray]
    line_offsets: np.ndarray
    blank_lines: int = 0
    bad_lines: dict[str, int] = field(default_factory=dict)
    bad_examples: list[str] = field(default_factory=list)
    nbytes: int = 0  # input bytes the records came from (set by the reader that knows)

    @property
    def lengths(self) -> dict[str, np.ndarray]:
        """key -> int64[documents], tokens per document (EOD included)."""
        result = {}
        for key, counts in self.document_sequences.items():
            bounds = np.concatenate([[0], np.cumsum(self.sequence_lengths[key])])
            ends = np.cumsum(counts)
            result[key] = bounds[ends] - bounds[ends - counts]
        return result


@dataclass
class ParsedLines:
    """What parsing some lines gave: the documents' line offsets (within the chunk) and
    texts (one list per document, one entry per key), blank lines and bad lines."""

    offsets: list[int] = field(default_factory=list)
    texts: list[list[str]] = field(default_factory=list)
    blank: int = 0
    bad: collections.Counter = field(default_factory=collections.Counter)
    examples: list[str] = field(default_factory=list)


def parse_lines(
    numbered, json_keys: Sequence[str], path: str, first_line: int, skip_bad_lines: bool
) -> ParsedLines:
    """Parse ``(offset, line)`` pairs (line ``first_line + offset`` of ``path``), in order:
    blank lines counted, a bad line raised (BadLineError) or counted by kind."""
    parsed = ParsedLines()
    for offset, line in numbered:
        if not line.strip():
            parsed.blank += 1
            continue
        line_number = first_line + offset
        try:
            values = parse_record(line, json_keys, path, line_number)
            if b"\\u" in line:  # an escape may hide a lone surrogate: check before encoding
                for key, value in zip(json_keys, values):
                    check_unicode(value, key, path, line_number)
        except BadLineError as error:
            if not skip_bad_lines:
                raise
            parsed.bad[error.kind] += 1
            if len(parsed.examples) < MAX_EXAMPLES:
                parsed.examples.append(str(error))
            continue
        parsed.offsets.append(offset)
        parsed.texts.append(values)
    return parsed


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
    splitter: SentenceSplitter | None = None,
    keep_empty: bool = False,
) -> TokenizedChunk:
    """Tokenize raw JSON-lines ``lines`` (line ``first_line + i`` of ``path``).

    Blank lines are skipped; a bad line raises BadLineError, or is counted by
    kind when ``skip_bad_lines``. Without ``splitter`` each text is one sequence;
    with it each sentence is one, and sentences that tokenize to nothing are
    dropped (Megatron). The EOD goes at the end of a document's last sequence. All
    texts of a key go through the tokenizer's ``encode_batch`` when it has one.
    ``keep_empty``: a text that tokenizes to nothing is still one (empty) sequence, and
    the EOD goes after every document (Megatron's ``preprocess_data_fast.py``).
    """
    parsed = parse_lines(enumerate(lines), json_keys, path, first_line, skip_bad_lines)
    columns = [[document[index] for document in parsed.texts] for index in range(len(json_keys))]
    tokens, sequence_lengths, document_sequences = encode_columns(
        columns, tokenizer, json_keys, path=path, first_line=first_line,
        last_line=first_line + len(lines) - 1, append_eod=append_eod, dtype=dtype,
        splitter=splitter, keep_empty=keep_empty,
    )
    return TokenizedChunk(
        documents=len(parsed.texts),
        tokens=tokens,
        sequence_lengths=sequence_lengths,
        document_sequences=document_sequences,
        line_offsets=np.asarray(parsed.offsets, dtype=np.int64),
        blank_lines=parsed.blank,
        bad_lines=dict(parsed.bad),
        bad_examples=parsed.examples,
    )


def encode_columns(
    columns: Sequence[Sequence[str]],
    tokenizer: Tokenizer,
    json_keys: Sequence[str],
    *,
    path: str,
    first_line: int,
    last_line: int,
    append_eod: bool,
    dtype: np.typing.DTypeLike,
    splitter: SentenceSplitter | None,
    keep_empty: bool = False,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Texts of D documents, one column (list[str], length D) per key, to token arrays.

    Returns per key: tokens (``dtype``), int64 sequence lengths and int64[D] sequences
    per document, as :class:`TokenizedChunk` holds them. ``first_line``/``last_line``
    only name the records in messages.
    """
    tokens, sequence_lengths, document_sequences = {}, {}, {}
    for key, column in zip(json_keys, columns):
        if splitter is None:
            pieces = list(column)
            per_document = np.ones(len(pieces), dtype=np.int64)
        else:
            split = [splitter.split(value) for value in column]
            pieces = [sentence for sentences in split for sentence in sentences]
            per_document = np.fromiter(map(len, split), np.int64, count=len(split))
        ids, lengths = encode_many(tokenizer, pieces, key, path, first_line)
        tokens[key], sequence_lengths[key], document_sequences[key] = assemble_documents(
            ids, lengths, per_document, tokenizer, append_eod, np.dtype(dtype),
            where=(path, first_line, last_line), keep_empty=keep_empty,
        )
    return tokens, sequence_lengths, document_sequences


def assemble_documents(
    ids: np.ndarray,
    lengths: np.ndarray,
    per_document: np.ndarray,
    tokenizer: Tokenizer,
    append_eod: bool,
    dtype: np.dtype,
    *,
    where: tuple[str, int, int],
    keep_empty: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pieces' ids (``lengths`` each; ``per_document`` pieces per document) to a corpus
    part: (tokens of ``dtype``, sequence lengths, sequences per document).

    Pieces that tokenize to nothing are dropped (Megatron's preprocess_data.py) unless
    ``keep_empty``; the EOD goes after each document's last sequence (after every
    document with ``keep_empty``). Ids outside ``dtype`` are a DataError naming ``where``
    (path, first line, last line)."""
    ids = _checked_ids(ids, dtype, *where)
    if keep_empty:
        counts = per_document
    else:
        keep = lengths > 0
        kept_before = np.concatenate([[0], np.cumsum(keep)])
        ends = np.cumsum(per_document)
        counts = kept_before[ends] - kept_before[ends - per_document]
        lengths = lengths[keep]
    if not append_eod:
        return ids.astype(dtype, copy=False), lengths, counts
    last = np.cumsum(counts)[counts > 0] - 1  # each document's last sequence
    lengths = lengths.copy()
    positions = np.cumsum(lengths)[last] + np.arange(last.size)  # where the EODs land
    lengths[last] += 1
    out = np.empty(ids.size + last.size, dtype)
    fill = np.ones(out.size, bool)
    fill[positions] = False
    out[fill] = ids
    out[positions] = int(tokenizer.eod_id)
    return out, lengths, counts


def _checked_ids(ids: np.ndarray, dtype: np.dtype, path: str, first: int, last: int):
    """``ids`` when every id fits ``dtype`` (one reduction per bound needed)."""
    if not ids.size:
        return ids
    info = np.iinfo(dtype)
    low = int(ids.min()) if ids.dtype.kind == "i" else 0
    high = int(ids.max())
    if low < 0 or high > info.max:
        bad = low if low < 0 else high
        raise DataError(
            f"{path}, lines {first}-{last}: the tokenizer produced id {bad}, outside "
            f"[0, {info.max}] of the output dtype {dtype} (is vocab_size right?)"
        )
    return ids
