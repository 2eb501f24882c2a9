"""Parsing one JSON-lines record: the string values of the wanted keys, or a BadLineError."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence

import numpy as np

from megadata_core.errors import DataError
from megadata_core.preprocess.tokenizers import Tokenizer


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


def _where(path: str, line_number: int) -> str:
    return f"{path}, line {line_number}"


def parse_record(line: bytes, json_keys: Sequence[str], path: str, line_number: int) -> list[str]:
    """The string values of ``json_keys`` in one JSON-lines record.

    ``line`` is the raw line (bytes, strict UTF-8); ``line_number`` is 1-based and
    only used in messages. Raises BadLineError naming the file and line.
    """
    where = _where(path, line_number)
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
    values = []
    for key in json_keys:
        if key not in record:
            present = ", ".join(repr(k) for k in list(record)[:8])
            more = ", ..." if len(record) > 8 else ""
            raise BadLineError(
                f"{where}: missing key {key!r} (keys present: {present or 'none'}{more})",
                "missing_key",
            )
        value = record[key]
        if not isinstance(value, str):
            kind_name = _JSON_TYPE_NAMES.get(type(value), type(value).__name__)
            raise BadLineError(
                f"{where}: key {key!r} holds {kind_name}, not a string", "not_string"
            )
        values.append(value)
    return values


def encode_text(
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
            f"{_where(path, line_number)}: tokenizer {tokenizer!r} returned {array.dtype} "
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
        f"{_where(path, line_number)}: key {key!r} holds text that is not valid Unicode "
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
        arrays = [encode_text(tokenizer, text, key, path, first_line) for text in texts]
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
