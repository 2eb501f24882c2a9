"""Tokenizing a chunk of consecutive lines into concatenated token arrays, per key: the
tokenizer protocol preprocessing needs (and a byte-level tokenizer for tests and demos),
parsing one JSON-lines record into the string values of its keys (or a BadLineError), and
the exact path (Python's ``json`` per line, the tokenizer's ``encode_batch``)."""

from __future__ import annotations

import collections
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from megadata_core.errors import DataError


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


class BadLineError(DataError):
    """A line that is not a usable record; ``kind`` says why.

    Kinds: ``invalid_utf8``, ``invalid_json``, ``not_object``, ``missing_key``,
    ``not_string``.
    """

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind

    def __reduce__(self):  # crosses process boundaries intact
        return (type(self), (str(self), self.kind))


_JSON_TYPE_NAMES = {
    dict: "an object",
    list: "an array",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def where_of(path: str, line_number: int) -> str:
    """``path, line N``: how messages name a line."""
    return f"{path}, line {line_number}"


def parse_record(line: bytes, json_keys: Sequence[str], path: str, line_number: int) -> list[str]:
    """The string values of ``json_keys`` in one JSON-lines record.

    ``line`` is the raw line (bytes, strict UTF-8); ``line_number`` is 1-based and
    only used in messages. Raises BadLineError naming the file and line.
    """
    values = []
    for key, value in zip(json_keys, parse_values(line, json_keys, path, line_number)):
        if not isinstance(value, str):
            kind_name = _JSON_TYPE_NAMES.get(type(value), type(value).__name__)
            raise BadLineError(
                f"{where_of(path, line_number)}: key {key!r} holds {kind_name}, not a string",
                "not_string",
            )
        values.append(value)
    return values


def parse_object(line: bytes, path: str, line_number: int) -> dict:
    """One JSON-lines record (bytes, strict UTF-8; ``line_number`` 1-based, for
    messages) as a dict; BadLineError naming the file and line otherwise."""
    where = where_of(path, line_number)
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadLineError(
            f"{where}: invalid UTF-8 at byte {error.start} ({error.reason})", "invalid_utf8"
        ) from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise BadLineError(
            f"{where}: invalid JSON: {error.msg} at column {error.colno}", "invalid_json"
        ) from None
    except RecursionError:
        raise BadLineError(f"{where}: invalid JSON: nested too deeply", "invalid_json") from None
    if not isinstance(record, dict):
        kind_name = _JSON_TYPE_NAMES.get(type(record), type(record).__name__)
        raise BadLineError(f"{where}: expected a JSON object, found {kind_name}", "not_object")
    return record


def parse_values(line: bytes, json_keys: Sequence[str], path: str, line_number: int) -> list:
    """The values of ``json_keys`` in one JSON-lines record, of any JSON type (see
    :func:`parse_record`)."""
    return values_of(parse_object(line, path, line_number), json_keys, path, line_number)


def values_of(record: dict, json_keys: Sequence[str], path: str, line_number: int) -> list:
    """The values of ``json_keys`` in a parsed record; BadLineError for a missing key."""
    values = []
    for key in json_keys:
        if key not in record:
            present = ", ".join(repr(k) for k in list(record)[:8])
            more = ", ..." if len(record) > 8 else ""
            raise BadLineError(
                f"{where_of(path, line_number)}: missing key {key!r} (keys present: "
                f"{present or 'none'}{more})",
                "missing_key",
            )
        values.append(record[key])
    return values


def _encode_text(
    tokenizer: Tokenizer, text: str, key: str, path: str, line_number: int
) -> np.ndarray:
    """Token ids of one text as a 1-D integer array."""
    try:
        ids = tokenizer.encode(text)
    except UnicodeEncodeError as error:
        raise _not_unicode(error, key, path, line_number) from None
    array = np.asarray(ids).reshape(-1)
    if array.size and array.dtype.kind not in "iu":
        raise DataError(
            f"{where_of(path, line_number)}: tokenizer {tokenizer!r} returned {array.dtype} "
            "values, not integer ids"
        )
    return array


def check_unicode(text: str, key: str, path: str, line_number: int) -> None:
    """BadLineError when ``text`` holds a lone surrogate (from a JSON ``\\ud800`` escape)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise _not_unicode(error, key, path, line_number) from None


def _not_unicode(error: UnicodeEncodeError, key: str, path: str, line_number: int):
    return BadLineError(
        f"{where_of(path, line_number)}: key {key!r} holds text that is not valid Unicode "
        f"({error.reason} at character {error.start})",
        "invalid_utf8",
    )


def encode_many(
    tokenizer: Tokenizer, texts: Sequence[str], key: str, path: str, first_line: int
) -> tuple[np.ndarray, np.ndarray]:
    """(int64 ids of every text concatenated, int64[len(texts)] lengths).

    Uses ``tokenizer.encode_batch(texts) -> (ids, lengths)`` when the tokenizer has
    one (a native batch encoder), else ``encode`` per text.
    """
    batch = getattr(tokenizer, "encode_batch", None)
    if batch is not None:
        ids, lengths = batch(texts)
        ids = np.asarray(ids).reshape(-1)
        lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    else:
        arrays = [_encode_text(tokenizer, text, key, path, first_line) for text in texts]
        lengths = np.fromiter(map(len, arrays), np.int64, count=len(arrays))
        ids = np.fromiter(itertools.chain.from_iterable(arrays), np.int64, int(lengths.sum()))
    if ids.size and ids.dtype.kind not in "iu":
        raise DataError(
            f"{path}, lines from {first_line}: tokenizer {tokenizer!r} returned {ids.dtype} "
            "values, not integer ids"
        )
    if lengths.shape != (len(texts),) or int(lengths.sum()) != ids.size:
        raise DataError(
            f"tokenizer {tokenizer!r}: encode_batch returned {lengths.size} lengths summing to "
            f"{int(lengths.sum())} for {len(texts)} texts and {ids.size} ids"
        )
    return ids.astype(np.int64, copy=False), lengths


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

    def refuse(self, error: BadLineError, skip_bad_lines: bool) -> None:
        """Raise ``error``, or with ``skip_bad_lines`` count it by kind (and keep its
        message among the first :data:`MAX_EXAMPLES`)."""
        if not skip_bad_lines:
            raise error
        self.bad[error.kind] += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(str(error))


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
            parsed.refuse(error, skip_bad_lines)
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
