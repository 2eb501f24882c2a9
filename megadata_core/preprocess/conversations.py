"""Conversations for chat corpora: JSON lines of conversations read and normalized to one
messages form, and the numpy part of their loss masks (roles per token from the character
spans of a rendered conversation, the tokens that straddle a span, and the check that the
tokens of each span decode to its text).

Input lines hold one conversation each, in either form:

* OpenAI's: ``{"messages": [{"role": "system"|"user"|"assistant"|"tool", "content": ...},
  ...]}``; an assistant message may have ``tool_calls`` (``[{"type": "function",
  "function": {"name": ..., "arguments": {...} or "..."}}]``, or ``{"name", "arguments"}``
  alone) and a reasoning segment (``reasoning_content``, or ``reasoning``/``thinking``); a
  tool message may have ``tool_call_id`` and ``name``.
* ShareGPT's: ``{"conversations": [{"from": "human"|"gpt"|"system"|"tool"|...,
  "value": ...}]}`` (``FROM_ROLES`` lists the names; ``function_call``'s value is a JSON
  object ``{"name", "arguments"}``, an assistant's tool call).

A record may also hold ``tools``, the tool definitions the template is given (an array of
objects, OpenAI's ``{"type": "function", "function": {"name", "description",
"parameters"}}``, passed as they are; or a JSON string of one, as LLaMA-Factory's
ShareGPT files write it).

Both become a :class:`Conversation` (:func:`normalize_conversation`), a list of message
dicts: ``role`` (one of ``MESSAGE_ROLES``), ``content`` (a string; ``""`` for an
assistant's tool calls without text), and where given ``reasoning_content``,
``tool_calls`` (each ``{"type": "function", "function": {"name", "arguments"}}`` plus
``id`` where given), ``tool_call_id``, ``name``. Other keys are dropped; the record's
tools are the conversation's ``tools``. A malformed conversation is a :class:`DataError`
naming the file, the line and the field (``messages[2].content``).

Rendering and tokenizing live in ``megadata_adapters.tokenizing.chat_roles`` (a
:class:`ConversationEncoder`); what is left is arrays: :func:`token_roles` gives each
token the role of the span holding it and finds the tokens that straddle a span boundary,
:func:`role_runs` cuts a roles array into runs, and :func:`check_roles` proves a roles
array against the texts it must give. The driver's side: a chunk of lines (or a table's
rows) of conversations to a chunk of the tokens corpus and the roles corpus beside it
(:func:`tokenize_conversations`, :func:`tokenize_conversation_rows`; the outputs a run
writes, :func:`output_keys`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import BinaryIO, Protocol, runtime_checkable

import numpy as np

from megadata_core.errors import DataError
from megadata_core.format.roles import ROLE_DTYPE, ROLES_SUFFIX, Role
from megadata_core.preprocess.encoding import (
    BadLineError,
    ParsedLines,
    TokenizedChunk,
    Tokenizer,
    assemble_documents,
    parse_object,
    values_of,
    where_of,
)
from megadata_core.preprocess.reading import naming_read_errors, open_input, strip_bom

__all__ = [
    "CONTENT_ROLES",
    "FROM_ROLES",
    "Conversation",
    "MESSAGE_ROLES",
    "check_roles",
    "expected_pieces",
    "normalize_conversation",
    "parse_conversation",
    "read_conversations",
    "role_runs",
    "token_roles",
]

MESSAGE_ROLES = ("system", "user", "assistant", "tool")

#: The Role of each message role's content.
CONTENT_ROLES = {"system": Role.SYSTEM, "user": Role.USER, "assistant": Role.ASSISTANT,
                 "tool": Role.TOOL}

#: ShareGPT ``from`` names -> message roles (``function_call``: an assistant's tool call).
FROM_ROLES = {
    "system": "system",
    "human": "user", "user": "user",
    "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant",
    "model": "assistant", "bard": "assistant", "bing": "assistant",
    "function_call": "assistant",
    "tool": "tool", "function_response": "tool", "observation": "tool", "ipython": "tool",
}

# Names a message's reasoning comes under (the first is the one templates read).
_REASONING_KEYS = ("reasoning_content", "reasoning", "thinking")

_JSON_NAMES = {dict: "an object", list: "an array", str: "a string", int: "a number",
               float: "a number", bool: "a boolean", type(None): "null"}


def _kind(value: object) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _text(value: object, where: str, field: str, *, empty_if_missing: bool = False) -> str:
    """``value`` as a string of valid Unicode, or a DataError naming ``field``."""
    if value is None and empty_if_missing:
        return ""
    if not isinstance(value, str):
        raise DataError(f"{where}: {field} must be a string, found {_kind(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise DataError(f"{where}: {field} holds text that is not valid Unicode "
                        f"({error.reason} at character {error.start})") from None
    return value


def _tool_calls(value: object, where: str, field: str) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise DataError(f"{where}: {field} must be a non-empty array, found {_kind(value)}")
    return [_tool_call(call, where, f"{field}[{i}]") for i, call in enumerate(value)]


def _tool_call(call: object, where: str, at: str) -> dict:
    """One tool call, normalized to ``{"type": "function", "function": {"name",
    "arguments"}}`` (+ ``id``)."""
    if not isinstance(call, dict):
        raise DataError(f"{where}: {at} must be an object, found {_kind(call)}")
    function = call.get("function", call)
    if "function" in call and not isinstance(function, dict):
        raise DataError(f"{where}: {at}.function must be an object, found {_kind(function)}")
    inner = f"{at}.function" if "function" in call else at
    name = _text(function.get("name"), where, f"{inner}.name")
    if not name:
        raise DataError(f"{where}: {inner}.name is empty")
    arguments = function.get("arguments", {})
    if not isinstance(arguments, (dict, str)):
        raise DataError(f"{where}: {inner}.arguments must be an object or a string, "
                        f"found {_kind(arguments)}")
    if isinstance(arguments, str):
        _text(arguments, where, f"{inner}.arguments")
    normalized: dict = {"type": "function",
                        "function": {"name": name, "arguments": arguments}}
    if call.get("id") is not None:
        normalized["id"] = _text(call["id"], where, f"{at}.id")
    return normalized


def _message(raw: object, where: str, field: str) -> dict:
    """One OpenAI-form message, normalized."""
    if not isinstance(raw, dict):
        raise DataError(f"{where}: {field} must be an object, found {_kind(raw)}")
    role = raw.get("role")
    if role not in MESSAGE_ROLES:
        found = repr(role) if isinstance(role, str) else _kind(role)
        raise DataError(f"{where}: {field}.role is {found}, not one of "
                        f"{', '.join(MESSAGE_ROLES)}")
    message: dict = {"role": role}
    calls = raw.get("tool_calls")
    if calls is not None:
        if role != "assistant":
            raise DataError(f"{where}: {field}.tool_calls: only an assistant message has "
                            f"tool calls (this one is {role!r})")
        message["tool_calls"] = _tool_calls(calls, where, f"{field}.tool_calls")
    if isinstance(raw.get("content"), list):
        raise DataError(f"{where}: {field}.content must be a string, found an array "
                        "(content parts are not read)")
    message["content"] = _text(raw.get("content"), where, f"{field}.content",
                               empty_if_missing="tool_calls" in message)
    reasoning = [key for key in _REASONING_KEYS if raw.get(key) is not None]
    if reasoning:
        if role != "assistant":
            raise DataError(f"{where}: {field}.{reasoning[0]}: only an assistant message has "
                            f"reasoning (this one is {role!r})")
        if len(reasoning) > 1 and len({json.dumps(raw[k]) for k in reasoning}) > 1:
            raise DataError(f"{where}: {field}: {' and '.join(reasoning)} differ (one "
                            "reasoning segment per message)")
        message["reasoning_content"] = _text(raw[reasoning[0]], where,
                                             f"{field}.{reasoning[0]}")
    if role == "tool":
        for key in ("tool_call_id", "name"):
            if raw.get(key) is not None:
                message[key] = _text(raw[key], where, f"{field}.{key}")
    return message


def _sharegpt_message(raw: object, where: str, field: str) -> dict:
    """One ShareGPT turn, as an OpenAI-form message."""
    if not isinstance(raw, dict):
        raise DataError(f"{where}: {field} must be an object, found {_kind(raw)}")
    speaker = raw.get("from")
    if speaker not in FROM_ROLES:
        found = repr(speaker) if isinstance(speaker, str) else _kind(speaker)
        raise DataError(f"{where}: {field}.from is {found}, not one of "
                        f"{', '.join(sorted(FROM_ROLES))}")
    value = _text(raw.get("value"), where, f"{field}.value")
    if speaker != "function_call":
        return {"role": FROM_ROLES[speaker], "content": value}
    try:
        call = json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        raise DataError(f"{where}: {field}.value of a function_call must be a JSON object "
                        "{\"name\", \"arguments\"}, found text that is no JSON") from None
    return {"role": "assistant", "content": "",
            "tool_calls": [_tool_call(call, where, f"{field}.value")]}


class Conversation(list):
    """One conversation's normalized messages (a list of message dicts, module docstring)
    and ``tools``, the tool definitions its record gives the template (a list of JSON
    objects, or None): what ``apply_chat_template(messages, tools=tools)`` renders."""

    def __init__(self, messages: Iterable[dict] = (), tools: list | None = None) -> None:
        super().__init__(messages)
        self.tools = tools

    def __repr__(self) -> str:
        return f"Conversation({list.__repr__(self)}, tools={self.tools!r})"


def _tools(value: object, where: str) -> list | None:
    """A record's ``tools``: an array of objects, or a JSON string of one; None if absent."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            raise DataError(f"{where}: tools is a string that is no JSON (give an array of "
                            "tool definitions, or a JSON string of one)") from None
    if not isinstance(value, list):
        raise DataError(f"{where}: tools must be an array of tool definitions, found "
                        f"{_kind(value)}")
    for i, tool in enumerate(value):
        if not isinstance(tool, dict):
            raise DataError(f"{where}: tools[{i}] must be an object, found {_kind(tool)}")
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as error:
        raise DataError(f"{where}: tools holds text that is not valid Unicode "
                        f"({error.reason})") from None
    return value


def normalize_conversation(record: object, where: str) -> Conversation:
    """A parsed JSON record's conversation: its normalized messages and its ``tools``
    (module docstring); a DataError naming ``where`` (file and line) and the field."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, found {_kind(record)}")
    forms = [key for key in ("messages", "conversations") if key in record]
    if len(forms) != 1:
        raise DataError(f"{where}: a conversation has one of the keys 'messages' (OpenAI) or "
                        f"'conversations' (ShareGPT), found "
                        f"{' and '.join(map(repr, forms)) or 'neither'}")
    key = forms[0]
    turns = record[key]
    if not isinstance(turns, list):
        raise DataError(f"{where}: {key} must be an array, found {_kind(turns)}")
    if not turns:
        raise DataError(f"{where}: {key} is empty (a conversation has a message at least)")
    read = _message if key == "messages" else _sharegpt_message
    return Conversation([read(turn, where, f"{key}[{i}]") for i, turn in enumerate(turns)],
                        _tools(record.get("tools"), where))


def parse_conversation(line: bytes, path: str, line_number: int) -> Conversation:
    """The normalized messages of one JSON line (bytes, strict UTF-8; ``line_number``
    1-based, for messages); BadLineError for bytes that are no JSON object, DataError for
    a malformed conversation, each naming the file and line."""
    where = f"{path}, line {line_number}"
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadLineError(f"{where}: invalid UTF-8 at byte {error.start} ({error.reason})",
                           "invalid_utf8") from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise BadLineError(f"{where}: invalid JSON: {error.msg} at column {error.colno}",
                           "invalid_json") from None
    except RecursionError:
        raise BadLineError(f"{where}: invalid JSON: nested too deeply", "invalid_json") from None
    if not isinstance(record, dict):
        raise BadLineError(f"{where}: expected a JSON object, found {_kind(record)}",
                           "not_object")
    return normalize_conversation(record, where)


def read_conversations(
    path: str, open_binary: Callable[[str], BinaryIO] = open_input
) -> Iterator[tuple[int, Conversation]]:
    """(1-based line number, normalized conversation) of each non-blank line of a JSON-lines
    file (plain, ``.gz``, or a URL ``open_binary`` opens)."""
    with naming_read_errors(path), open_binary(path) as stream:
        for number, line in enumerate(stream, start=1):
            if number == 1:
                line = strip_bom(line)
            if line.strip():
                yield number, parse_conversation(line, path, number)


def token_roles(
    offsets: np.ndarray, bounds: np.ndarray, roles: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each token's role from the character spans of its text.

    ``offsets``: int64 [T, 2], each token's characters [start, stop) in the rendered text,
    in order; ``bounds``: int64 [S, 2], the spans' characters, sorted and disjoint (empty
    spans are ignored); ``roles``: uint8 [S], each span's Role. Returns (uint8 [T] roles:
    the role of the span that holds the token, TEMPLATE outside every span; int64 [k] the
    tokens that straddle a span's start or stop: a conversation with any is unprovable).
    """
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    bounds = np.asarray(bounds, dtype=np.int64).reshape(-1, 2)
    roles = np.asarray(roles, dtype=ROLE_DTYPE).reshape(-1)
    if roles.size != bounds.shape[0]:
        raise DataError(f"token_roles: {bounds.shape[0]} spans but {roles.size} roles")
    keep = bounds[:, 1] > bounds[:, 0]
    bounds, roles = bounds[keep], roles[keep]
    starts, stops = bounds[:, 0], bounds[:, 1]
    if starts.size and (np.any(starts[1:] < stops[:-1])):
        raise DataError("token_roles: spans must be sorted and disjoint")
    first, last = offsets[:, 0], offsets[:, 1]
    edges = bounds.reshape(-1)  # sorted: every span's start and stop
    # An edge strictly inside a token's characters: the token straddles it.
    inside = np.searchsorted(edges, last, side="left") - np.searchsorted(edges, first,
                                                                         side="right")
    straddling = np.flatnonzero(inside > 0)
    span = np.searchsorted(starts, first, side="right") - 1
    held = span >= 0
    held[held] &= first[held] < stops[span[held]]
    result = np.full(offsets.shape[0], Role.TEMPLATE, dtype=ROLE_DTYPE)
    result[held] = roles[span[held]]
    return result, straddling


def role_runs(roles: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The runs of equal roles other than TEMPLATE in uint8 [T] ``roles``: (int64 [k]
    first tokens, int64 [k] stops, uint8 [k] each run's role)."""
    roles = np.asarray(roles).reshape(-1)
    change = np.flatnonzero(np.diff(roles.astype(np.int16))) + 1
    starts = np.concatenate([[0], change]).astype(np.int64) if roles.size else np.zeros(0,
                                                                                     np.int64)
    stops = np.append(starts[1:], roles.size).astype(np.int64)
    keep = roles[starts] != Role.TEMPLATE if roles.size else np.zeros(0, bool)
    return starts[keep], stops[keep], roles[starts[keep]].astype(ROLE_DTYPE)


def expected_pieces(text: str, bounds: np.ndarray, roles: np.ndarray) -> list[tuple[int, str]]:
    """The (role, text) pieces that the runs of a proven roles array decode to: the
    non-empty spans of ``text`` (``bounds`` int64 [S, 2] sorted, ``roles`` uint8 [S])
    other than TEMPLATE, in order, touching spans of one role joined."""
    pieces: list[tuple[int, str]] = []
    last_stop = -1
    for (start, stop), role in zip(np.asarray(bounds).reshape(-1, 2).tolist(),
                                   np.asarray(roles).reshape(-1).tolist()):
        if stop <= start or role == Role.TEMPLATE:
            continue
        if pieces and pieces[-1][0] == role and start == last_stop:
            pieces[-1] = (role, pieces[-1][1] + text[start:stop])
        else:
            pieces.append((role, text[start:stop]))
        last_stop = stop
    return pieces


def check_roles(
    ids: np.ndarray,
    roles: np.ndarray,
    pieces: Sequence[tuple[int, str]],
    decode: Callable[[np.ndarray], str],
) -> str | None:
    """Whether per-token ``roles`` (uint8 [T]) of ``ids`` (integer [T]) are right: the runs
    of each role (:func:`role_runs`) are, in order, exactly ``pieces`` (role, text), each
    run's ids decoding (``decode``, special tokens kept) to its piece's text. None when
    proven, else what differs (a wrong mask, a trained token too many or too few, fails)."""
    starts, stops, run_roles = role_runs(roles)
    if len(pieces) != starts.size:
        return (f"{starts.size} runs of roles other than TEMPLATE where the rendered text has "
                f"{len(pieces)} spans")
    ids = np.asarray(ids).reshape(-1)
    for k, (start, stop, role, (want_role, want)) in enumerate(
            zip(starts.tolist(), stops.tolist(), run_roles.tolist(), pieces)):
        if role != want_role:
            return (f"run {k} (tokens {start}..{stop}) is {Role(role).name}, its span is "
                    f"{Role(want_role).name}")
        got = decode(ids[start:stop])
        if got != want:
            return (f"run {k} ({Role(role).name}, tokens {start}..{stop}) decodes to "
                    f"{got[:60]!r}, its span is {want[:60]!r}")
    return None


@runtime_checkable
class ConversationEncoder(Tokenizer, Protocol):
    """A tokenizer that renders conversations with a chat template: each to its token ids
    and the :class:`~megadata_core.format.roles.Role` of every token."""

    def encode_conversations(
        self, conversations: Sequence[object], where: Sequence[str],
        tools: Sequence[object] | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray] | BadLineError]:
        """Per conversation (a JSON value as a line holds it; ``where[i]`` names its file
        and line for messages; ``tools[i]`` its record's ``tools`` value as given, None
        where it has none): (int ids [n], uint8 roles [n]), or the BadLineError that
        refuses it (malformed, or a mask that cannot be proven)."""
        ...


def is_conversational(tokenizer: object) -> bool:
    """Whether ``tokenizer`` encodes conversations (a :class:`ConversationEncoder`)."""
    return callable(getattr(tokenizer, "encode_conversations", None))


def output_keys(json_keys: Sequence[str], tokenizer: object) -> tuple[str, ...]:
    """The corpora a run writes: one per key, and each key's roles
    (``key + ROLES_SUFFIX``) when ``tokenizer`` encodes conversations."""
    keys = tuple(json_keys)
    if not is_conversational(tokenizer):
        return keys
    return keys + tuple(key + ROLES_SUFFIX for key in keys)


def output_dtype(key: str, token_dtype: np.dtype) -> np.dtype:
    """The dtype of output ``key``'s corpus: ``token_dtype``, or uint8 for roles."""
    return np.dtype(ROLE_DTYPE) if key.endswith(ROLES_SUFFIX) else np.dtype(token_dtype)


class _RoleEod:
    eod_id = int(Role.TEMPLATE)  # the EOD after a conversation is the template's own token


def tokenize_conversations(
    lines: Sequence[bytes],
    tokenizer: ConversationEncoder,
    json_keys: Sequence[str],
    *,
    path: str = "<input>",
    first_line: int = 1,
    append_eod: bool = False,
    dtype: np.typing.DTypeLike = np.int32,
    skip_bad_lines: bool = False,
) -> TokenizedChunk:
    """Conversations of JSON-lines ``lines`` (line ``first_line + i`` of ``path``; the one
    key of ``json_keys`` holds each) to their tokens (under the key) and roles (under
    ``key + ROLES_SUFFIX``): one document of one sequence each, the EOD after it with
    ``append_eod`` (role TEMPLATE). A refused conversation raises its BadLineError, or is
    counted by kind with ``skip_bad_lines``."""
    if len(json_keys) != 1:
        raise DataError(f"json_keys: {list(json_keys)!r}: a conversation corpus takes one key "
                        "(the one that holds each line's messages)")
    key = json_keys[0]
    parsed = ParsedLines()
    values, where, tools = [], [], []
    for offset, line in enumerate(lines):
        if not line.strip():
            parsed.blank += 1
            continue
        try:
            record = parse_object(line, path, first_line + offset)
            values.append(values_of(record, json_keys, path, first_line + offset)[0])
        except BadLineError as error:
            parsed.refuse(error, skip_bad_lines)
            continue
        tools.append(record.get("tools"))
        where.append(where_of(path, first_line + offset))
        parsed.offsets.append(offset)
    return encode_conversation_values(values, where, parsed, tokenizer, key, tools=tools,
                                      span=(path, first_line, first_line + len(lines) - 1),
                                      append_eod=append_eod, dtype=dtype,
                                      skip_bad_lines=skip_bad_lines)


def encode_conversation_values(
    values: Sequence[object],
    where: Sequence[str],
    parsed: ParsedLines,
    tokenizer: ConversationEncoder,
    key: str,
    *,
    tools: Sequence[object] | None = None,
    span: tuple[str, int, int],
    append_eod: bool,
    dtype: np.typing.DTypeLike,
    skip_bad_lines: bool,
) -> TokenizedChunk:
    """The chunk of conversations ``values`` (each named by ``where``; their offsets within
    the chunk in ``parsed.offsets``, which also counts blank and bad entries): see
    :func:`tokenize_conversations`. ``tools``: each one's record's ``tools`` (None: none
    given). ``span``: (path, first, last line or row) for errors."""
    path, first_line, last_line = span
    kept, ids, roles = [], [], []
    # tools only where a record gives some: an encoder written before tools keeps working
    results = (tokenizer.encode_conversations(values, where, tools=tools)
               if tools is not None and any(t is not None for t in tools)
               else tokenizer.encode_conversations(values, where))
    for offset, place, result in zip(parsed.offsets, where, results):
        if isinstance(result, BadLineError):
            parsed.refuse(result, skip_bad_lines)
            continue
        tokens, codes = (np.asarray(part).reshape(-1) for part in result)
        if tokens.shape != codes.shape or (tokens.size and tokens.dtype.kind not in "iu"):
            raise DataError(f"tokenizer {tokenizer!r}: {tokens.size} ids ({tokens.dtype}) "
                            f"and {codes.size} roles for {place}")
        kept.append(offset)
        ids.append(tokens)
        roles.append(codes)
    lengths = np.fromiter(map(len, ids), np.int64, count=len(ids))
    ones = np.ones(len(ids), np.int64)
    all_ids = np.concatenate(ids).astype(np.int64) if ids else np.zeros(0, np.int64)
    all_roles = np.concatenate(roles) if roles else np.zeros(0, ROLE_DTYPE)
    if all_roles.size and (all_roles.dtype.kind not in "iu" or int(all_roles.min()) < 0
                           or int(all_roles.max()) >= len(Role)):
        raise DataError(f"tokenizer {tokenizer!r}: role codes outside 0..{len(Role) - 1} "
                        f"for {path}, lines {first_line}-{last_line}")
    out_tokens, sequence_lengths, counts = assemble_documents(
        all_ids, lengths, ones, tokenizer, append_eod, np.dtype(dtype), where=span)
    out_roles, _, _ = assemble_documents(
        all_roles.astype(np.int64), lengths, ones, _RoleEod(),  # type: ignore[arg-type]
        append_eod, np.dtype(ROLE_DTYPE), where=span)
    roles_key = key + ROLES_SUFFIX
    return TokenizedChunk(
        documents=len(kept),
        tokens={key: out_tokens, roles_key: out_roles},
        sequence_lengths={key: sequence_lengths, roles_key: sequence_lengths},
        document_sequences={key: counts, roles_key: counts},
        line_offsets=np.asarray(kept, dtype=np.int64),
        blank_lines=parsed.blank,
        bad_lines=dict(parsed.bad),
        bad_examples=parsed.examples,
    )


def tokenize_conversation_rows(
    values: Sequence[object],
    tokenizer: ConversationEncoder,
    json_keys: Sequence[str],
    *,
    where: str,
    tools: Sequence[object] | None = None,
    append_eod: bool = False,
    dtype: np.typing.DTypeLike = np.int32,
    skip_bad_lines: bool = False,
) -> TokenizedChunk:
    """:func:`tokenize_conversations` of a table's rows: ``values[i]`` is row i's value of
    the one key (a messages list, as Arrow gives it; None for a null), ``tools[i]`` its
    ``tools`` column's (None: no such column), ``where`` names the table's part (rows are
    named from 1 within it)."""
    if len(json_keys) != 1:
        raise DataError(f"json_keys: {list(json_keys)!r}: a conversation corpus takes one key "
                        "(the column that holds each row's messages)")
    parsed = ParsedLines()
    kept, names, offered = [], [], []
    for row, value in enumerate(values):
        if value is None:
            parsed.refuse(BadLineError(f"{where}, row {row + 1}: column {json_keys[0]!r} "
                                          "holds null, not a conversation", "not_conversation"),
                     skip_bad_lines)
            continue
        kept.append(value)
        names.append(f"{where}, row {row + 1}")
        offered.append(tools[row] if tools is not None else None)
        parsed.offsets.append(row)
    return encode_conversation_values(kept, names, parsed, tokenizer, json_keys[0],
                                      tools=offered,
                                      span=(where, 1, len(values)), append_eod=append_eod,
                                      dtype=dtype, skip_bad_lines=skip_bad_lines)
