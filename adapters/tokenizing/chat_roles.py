"""Rendered conversations tokenized, each token given a role that is proven right or
refused.

API::

    ids, roles, skipped = encode_conversations(
        conversations, template, tokenizer, on_unprovable="refuse", where=None)
    results = encode_each(conversations, template, tokenizer)   # per conversation

``template``: a :class:`~.chat_templates.ChatTemplate`; ``conversations``: lists of
messages as ``megadata_core.preprocess.conversations`` normalizes them (a
``Conversation`` also gives the template its ``tools``, rendered as template text, never
trained); ``tokenizer``: a
``tokenizers.Tokenizer``, a ``tokenizer.json`` or a directory holding one, or a tokenizer
with a ``path`` to one (``HuggingFaceTokenizer``). Returns int32 [T_i] ids and uint8 [T_i]
``Role`` codes per conversation, and how many were skipped. ``where[i]`` names
conversation i in errors (e.g. ``"chat.jsonl, line 3"``).

The roles, proven for each conversation:

1. The conversation is rendered once for real and once with each content, reasoning
   segment and tool call's name replaced by a placeholder (private-use characters absent
   from the text). The template's text around the placeholders must give the real text
   once the values are put back, each as given or trimmed (Jinja's ``trim``), in exactly
   one way; each value then has its character span. Empty values get placeholders too
   (they anchor an assistant's end of turn); where that changes the render (a template
   testing ``if message.content``), those of messages with tool calls, then all, are
   left empty, and an assistant message left with no segment at all is unprovable.
2. An assistant's end of turn is ``end_of_turn``, else the added token the template puts
   right after an assistant's content (probed once per call); its first occurrence in
   the template's text after the message's last segment (before the next segment) is
   the END_OF_TURN span. With tool calls, the text from the end of the content before
   the first call's name (the name itself when no content precedes it) to the end of
   turn is TOOL_CALL; the calls' data must not hold the end of turn (which one ends the
   turn is unknown then).
3. Tokens get the role of the span holding them (offsets of the tokenizer without its
   post-processor, which trims offsets and adds no token without special tokens); a
   token straddling a span's edge makes the conversation unprovable. With a
   :class:`ByteOffsets` fast path (:func:`fast_path`: a byte-level BPE whose text-path
   encoder is proven to give ``tokenizers``' ids) the ids come from that encoder and the
   offsets, in UTF-8 bytes, from each token's byte length; the spans are compared in
   bytes too (a token cutting a multi-byte character at a span's edge straddles it).
4. Each run of one role other than TEMPLATE must decode to exactly its span's text.

A conversation failing any step (or refused by the template itself) is a DataError
naming it; with ``on_unprovable="skip"`` it is skipped and counted. Prefix renders are
never used: they are not token-exact.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from megadata_core.errors import DataError
from megadata_core.format.roles import ROLE_DTYPE, Role
from megadata_core.preprocess.conversations import (
    CONTENT_ROLES,
    Conversation,
    check_roles,
    expected_pieces,
    token_roles,
)

from .chat_templates import ChatTemplate

__all__ = [
    "ByteOffsets",
    "encode_conversations",
    "encode_each",
    "end_of_turn_of",
    "fast_path",
    "load_tokenizer_object",
]


def load_tokenizer_object(tokenizer):
    """A ``tokenizers.Tokenizer`` from one, from a ``tokenizer.json`` (or a directory
    holding one), or from a tokenizer with a ``path`` to one."""
    from tokenizers import Tokenizer

    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    path = getattr(tokenizer, "path", tokenizer)
    if not isinstance(path, (str, os.PathLike)):
        raise DataError(f"tokenizer {tokenizer!r}: expected a tokenizers.Tokenizer, a "
                        "tokenizer.json or a directory holding one")
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(path):
        raise DataError(f"{path}: tokenizer.json not found")
    try:
        return Tokenizer.from_file(path)
    except Exception as error:  # tokenizers raises its own Exception type
        raise DataError(f"{path}: not a readable tokenizer.json: {error}") from error


def _without_post_processor(tokenizer):
    """The tokenizer without its post-processor: with ``add_special_tokens=False``
    post-processors add no token, but ByteLevel's and RoBERTa's trim offsets (a
    whitespace token's offsets become empty), which the spans cannot use."""
    if tokenizer.post_processor is None:
        return tokenizer
    from tokenizers import Tokenizer

    # Kept per tokenizer object (held, so its id stays its own): a driver encodes block
    # after block with one tokenizer, and a 128k vocabulary takes a while to copy.
    held = _CLONES.get(id(tokenizer))
    if held is not None and held[0] is tokenizer:
        return held[1]
    clone = Tokenizer.from_str(tokenizer.to_str())
    clone.post_processor = None
    while len(_CLONES) >= 4:
        _CLONES.pop(next(iter(_CLONES)))
    _CLONES[id(tokenizer)] = (tokenizer, clone)
    return clone


_CLONES: dict[int, tuple[object, object]] = {}


class ByteOffsets:
    """The fast path of :func:`encode_each`: each rendered text cut at the tokenizer's
    added tokens (as ``tokenizers`` splits them out: every occurrence, leftmost first,
    none can overlap another), the pieces between them encoded by ``encode_batch`` (a
    text-path encoder proven to give ``tokenizers``' ids on texts without added tokens),
    and each token's UTF-8 byte range from ``byte_lengths`` (int64 [V], -1 for an id of
    unknown bytes). ``name`` says which encoder; ``texts`` counts the texts it encoded."""

    def __init__(self, encode_batch: Callable[[Sequence[str]], tuple[np.ndarray, np.ndarray]],
                 byte_lengths: np.ndarray, added: Mapping[str, int], name: str) -> None:
        self._encode_batch = encode_batch
        self.byte_lengths = np.asarray(byte_lengths, dtype=np.int64)
        self.added = dict(added)
        self.name = name
        self.texts = 0
        ordered = sorted(self.added, key=len, reverse=True)  # (longest first: leftmost-longest)
        self._split = (re.compile("(" + "|".join(map(re.escape, ordered)) + ")").split
                       if ordered else None)

    def encode(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray] | None]:
        """Per text: (int32 [T] ids, int64 [T, 2] byte offsets in its UTF-8 text), or None
        for a text this path does not take (not UTF-8 encodable, or its tokens' bytes are
        not the text's: the caller encodes it with ``tokenizers``)."""
        pieces: list[str] = []
        added_ids: list[int] = []
        counts, sizes, taken = [], [], []
        for k, text in enumerate(texts):
            try:
                size = len(text.encode("utf-8"))
            except UnicodeEncodeError:  # lone surrogates: tokenizers' own error, if any
                continue
            parts = self._split(text) if self._split is not None else [text]
            pieces.extend(parts[0::2])
            added_ids.extend(self.added[token] for token in parts[1::2])
            counts.append(len(parts) // 2)
            sizes.append(size)
            taken.append(k)
        results: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(texts)
        if not taken:
            return results
        piece_ids, piece_lengths = self._encode_batch(pieces)
        piece_ids = np.asarray(piece_ids, dtype=np.int64)
        piece_lengths = np.asarray(piece_lengths, dtype=np.int64)
        added_count = np.asarray(counts, dtype=np.int64)  # added tokens of each text
        # segments of text t: piece, added, piece, ..., piece (2 a_t + 1)
        segments = 2 * added_count + 1
        first_segment = np.cumsum(segments) - segments
        n_pieces = added_count + 1
        piece_of = np.repeat(np.arange(len(taken)), n_pieces)
        piece_rank = np.arange(piece_of.size) - np.repeat(np.cumsum(n_pieces) - n_pieces,
                                                          n_pieces)
        piece_at = first_segment[piece_of] + 2 * piece_rank
        added_of = np.repeat(np.arange(len(taken)), added_count)
        added_rank = np.arange(added_of.size) - np.repeat(np.cumsum(added_count) - added_count,
                                                          added_count)
        added_at = first_segment[added_of] + 2 * added_rank + 1
        total = int(segments.sum())
        length = np.empty(total, np.int64)
        source_start = np.empty(total, np.int64)
        length[piece_at], length[added_at] = piece_lengths, 1
        source_start[piece_at] = np.cumsum(piece_lengths) - piece_lengths
        source_start[added_at] = piece_ids.size + np.arange(added_at.size)
        source = np.concatenate([piece_ids, np.asarray(added_ids, dtype=np.int64)])
        out_start = np.cumsum(length) - length
        ids = source[np.repeat(source_start - out_start, length) + np.arange(int(length.sum()))]
        tokens = np.add.reduceat(length, first_segment) if total else np.zeros(0, np.int64)
        known = (ids >= 0) & (ids < self.byte_lengths.size)
        widths = np.where(known, self.byte_lengths[np.where(known, ids, 0)], -1)
        stops = np.cumsum(widths)
        text_start = np.cumsum(tokens) - tokens
        before = np.where(text_start > 0, stops[np.maximum(text_start - 1, 0)], 0)
        relative_stops = stops - np.repeat(before, tokens)
        bad = np.repeat(np.arange(len(taken)), tokens)[widths < 0]
        ok = np.ones(len(taken), bool)
        ok[bad] = False
        ends = np.where(tokens > 0, relative_stops[np.maximum(text_start + tokens - 1, 0)], 0)
        ok &= ends == np.asarray(sizes, np.int64)
        offsets = np.stack([relative_stops - widths, relative_stops], axis=1)
        ids32 = ids.astype(np.int32)
        for j, k in enumerate(taken):
            if ok[j]:
                a, b = int(text_start[j]), int(text_start[j] + tokens[j])
                results[k] = ids32[a:b], offsets[a:b]
        self.texts += int(ok.sum())
        return results

    def __repr__(self) -> str:
        return f"ByteOffsets({self.name!r})"


def fast_path(tokenizer, rust) -> tuple[ByteOffsets | None, str]:
    """(the :class:`ByteOffsets` fast path of ``tokenizer``, "") or (None, why not).

    Taken only where the text path proved its encoder: ``tokenizer`` (a
    ``HuggingFaceTokenizer``) holds a ``byte_level_bpe.RankEncoder`` for its
    ``tokenizer.json``, which proves the merges canonical and the file plain (no
    normalizer, GPT-2's ByteLevel pre-tokenizer, added tokens matched literally, none
    overlapping another), so its ``encode_batch`` (gigatoken where proven, else tiktoken)
    gives ``tokenizers``' ids on texts without added tokens. ``rust`` (the
    ``tokenizers.Tokenizer`` of the same file) must split out the same added tokens, and
    gives each id's bytes (a byte-alphabet token stands for one byte a character)."""
    from .byte_level_bpe import RankEncoder, is_byte_alphabet

    ranks = getattr(tokenizer, "_ranks", None)
    if not isinstance(ranks, RankEncoder) or not callable(getattr(tokenizer, "encode_batch",
                                                                  None)):
        return None, ("the tokenizer has no proven byte-level BPE encoder "
                      f"({getattr(tokenizer, 'encoder', type(tokenizer).__name__)})")
    if getattr(rust, "encode_special_tokens", False):
        return None, "the tokenizer encodes its special tokens as text"
    decoder = rust.get_added_tokens_decoder()
    added = {token.content: int(i) for i, token in decoder.items() if token.content}
    if added != ranks.added or any(token.lstrip or token.rstrip or token.single_word
                                   for token in decoder.values()):
        return None, "tokenizers reads other added tokens from the file than the proof did"
    vocab = rust.get_vocab(with_added_tokens=True)
    lengths = np.full(max(vocab.values(), default=-1) + 1, -1, dtype=np.int64)
    for token, i in vocab.items():
        if token in added:
            lengths[i] = len(token.encode("utf-8"))
        elif is_byte_alphabet(token):
            lengths[i] = len(token)
    for token, i in added.items():  # (an added token's id wins)
        lengths[i] = len(token.encode("utf-8"))
    name = f"byte offsets over {getattr(tokenizer, 'encoder', 'its encode_batch')}"
    return ByteOffsets(tokenizer.encode_batch, lengths, added, name), ""


def _byte_bounds(text: str, bounds: np.ndarray) -> np.ndarray:
    """int64 [S, 2] character ``bounds`` of ``text`` as offsets in its UTF-8 bytes."""
    if text.isascii():
        return bounds
    points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    widths = 1 + (points >= 0x80).astype(np.int64) + (points >= 0x800) + (points >= 0x10000)
    at = np.zeros(points.size + 1, dtype=np.int64)
    np.cumsum(widths, out=at[1:])
    return at[bounds]


def _placeholders(count: int, taken: str) -> list[str]:
    """``count`` distinct placeholders of private-use characters, none in ``taken``:
    a start, an index character and an end each."""
    used = set(taken)
    free = (chr(c) for c in range(0xF0000, 0x10FFFE) if chr(c) not in used)
    start, end = next(free), next(free)
    return [start + next(free) + end for _ in range(count)]


class _UnprovableError(Exception):
    """Why one conversation's roles cannot be proven."""


def _reinsert(pieces: list[str], values: list[str], real: str) -> list[tuple[int, int]]:
    """The character spans of ``values`` in ``real``, given the placeholder render split
    into template text and placeholders (``pieces``: text, value index, text, ...): each
    value as given or trimmed (Jinja's ``trim``), the one way that gives ``real`` exactly;
    _UnprovableError when none does (the template reads or changes a value) or when two
    do (a trimmed value touching another: its edge is unknown)."""
    texts, order = pieces[0::2], [int(k) for k in pieces[1::2]]
    found: list[list[tuple[int, int]]] = []
    dead: set[tuple[int, int]] = set()

    def search(k: int, position: int, spans: list[tuple[int, int]]) -> None:
        # value k goes at ``position``, just after its template text texts[k]
        if len(found) > 1 or (k, position) in dead:
            return
        before = len(found)
        if k == len(order):
            if position == len(real):
                found.append(list(spans))
            return
        value = values[order[k]]
        for candidate in dict.fromkeys([value, value.strip()]):
            stop = position + len(candidate)
            if real.startswith(candidate, position) and real.startswith(texts[k + 1], stop):
                search(k + 1, stop + len(texts[k + 1]), [*spans, (position, stop)])
        if len(found) == before:
            dead.add((k, position))

    if real.startswith(texts[0]):
        search(0, len(texts[0]), [])
    if not found:
        raise _UnprovableError("the template's text differs when the contents are put back, "
                               "as given or trimmed (the template reads or changes them)")
    if len(found) > 1:
        raise _UnprovableError("a trimmed content touches another: their edge is unknown")
    return found[0]


_NAME = -1  # the "role" of a tool call's name: an anchor, not a span of its own


def _every(message: dict) -> bool:
    return True


def _without_calls(message: dict) -> bool:
    return not message.get("tool_calls")


def _no_message(message: dict) -> bool:
    return False


def _values(messages: Sequence[dict], empty: Callable[[dict], bool]
            ) -> list[tuple[int, object, int]]:
    """(message index, field, Role) of each content and reasoning segment and each tool
    call's name (field ``(j,)``: call j, role _NAME); empty strings only of the messages
    ``empty`` says."""
    found: list[tuple[int, object, int]] = []
    for i, message in enumerate(messages):
        if empty(message) or message["content"]:
            found.append((i, "content", int(CONTENT_ROLES[message["role"]])))
        if message.get("reasoning_content") is not None and (empty(message)
                                                             or message["reasoning_content"]):
            found.append((i, "reasoning_content", int(Role.REASONING)))
        for j in range(len(message.get("tool_calls") or ())):
            found.append((i, (j,), _NAME))
    return found


def _value(message: dict, field) -> str:
    if isinstance(field, tuple):
        return message["tool_calls"][field[0]]["function"]["name"]
    return message[field]


def _mark(message: dict, field, mark: str) -> None:
    if isinstance(field, tuple):
        calls = message["tool_calls"] = list(message["tool_calls"])
        call = calls[field[0]] = dict(calls[field[0]])
        call["function"] = {**call["function"], "name": mark}
    else:
        message[field] = mark


def _segments(template: ChatTemplate, messages: Sequence[dict], real: str,
              empty: Callable[[dict], bool]) -> tuple[list[str], list[tuple[int, int, int, int]]]:
    """The placeholder render's pieces (text, index, text, ...) and the segments (start,
    stop, role, message) in the real text, in its order."""
    fields = _values(messages, empty)
    values = [_value(messages[i], field) for i, field, _ in fields]
    marks = _placeholders(len(fields), real + template.source)
    marked = Conversation((dict(message) for message in messages),
                          getattr(messages, "tools", None))
    for (i, field, _), mark in zip(fields, marks):
        _mark(marked[i], field, mark)
    try:
        skeleton = template.render(marked)
    except Exception as error:  # jinja2's errors, raise_exception's among them
        raise _UnprovableError(f"the template fails on placeholders: {error}") from None
    if not marks:
        if skeleton != real:
            raise _UnprovableError("the template renders the conversation differently twice")
        return [skeleton], []
    index_of = {mark: str(k) for k, mark in enumerate(marks)}
    pieces = re.split("(" + "|".join(map(re.escape, marks)) + ")", skeleton)
    pieces[1::2] = [index_of[mark] for mark in pieces[1::2]]
    if len(set(pieces[1::2])) < len(pieces[1::2]):
        raise _UnprovableError("the template renders a content more than once")
    spans = _reinsert(pieces, values, real)
    order = [int(k) for k in pieces[1::2]]
    return pieces, [(start, stop, fields[k][2], fields[k][0])
                    for k, (start, stop) in zip(order, spans)]


def _spans(template: ChatTemplate, messages: Sequence[dict], real: str, end_of_turn: str
           ) -> tuple[np.ndarray, np.ndarray]:
    """(int64 [S, 2] sorted spans, uint8 [S] roles) of one rendered conversation.

    Empty contents get placeholders too (their place anchors an assistant's end of turn);
    when that changes the render (a template testing ``if message.content``), those of
    messages with tool calls (whose names anchor them), then all, are left empty."""
    if not any(_value(messages[i], f) == "" for i, f, _ in _values(messages, _every)):
        passes = [_every]
    else:
        passes = [_every, _without_calls, _no_message]
    for n, empty in enumerate(passes):
        try:
            pieces, found = _segments(template, messages, real, empty)
            break
        except _UnprovableError:
            if n == len(passes) - 1:
                raise
    # Each assistant's end of turn: in the template's text after its last segment (up to
    # the next segment), where only its tool calls' data can add text that is no template's.
    last: dict[int, int] = {}
    for j, (_, _, _, message) in enumerate(found):
        if messages[message]["role"] == "assistant":
            last[message] = j
    missing = [i for i, m in enumerate(messages) if m["role"] == "assistant" and i not in last]
    if missing and len(pieces) > 1:
        raise _UnprovableError(f"assistant message {missing[0]} is empty and the template "
                               "tests its content: where its end of turn is is unknown")
    extra = []
    for message, j in last.items():
        after, stop = pieces[2 * j + 2], found[j][1]
        calls = bool(messages[message].get("tool_calls"))
        count = after.count(end_of_turn)
        if count == 0:
            raise _UnprovableError(f"assistant message {message} has no end of turn "
                                   f"{end_of_turn!r} after its content")
        if count > 1 and calls:
            raise _UnprovableError(f"assistant message {message}'s tool calls hold its end of "
                                   f"turn {end_of_turn!r}: which one ends it is unknown")
        at = stop + after.find(end_of_turn)
        if calls:
            # the tool calls: from the end of the content before the first call's name
            # (its name when there is none) to the end of turn
            own = [seg for seg in found if seg[3] == message]
            # (no name rendered: the template leaves the calls out, or writes them from
            # the content's end)
            first = next((seg[0] for seg in own if seg[2] == _NAME), at)
            before = [seg[1] for seg in own if seg[2] != _NAME and seg[1] <= first]
            start = max(before, default=first)
            if any(seg[2] != _NAME and seg[0] < at and seg[1] > start for seg in own):
                raise _UnprovableError(f"assistant message {message}'s content lies between "
                                       "its tool calls")
            if at > start:
                extra.append((start, at, int(Role.TOOL_CALL), message))
        extra.append((at, at + len(end_of_turn), int(Role.END_OF_TURN), message))
    found = sorted([seg for seg in found if seg[2] != _NAME] + extra)
    bounds = np.array([(s, e) for s, e, _, _ in found], dtype=np.int64).reshape(-1, 2)
    roles = np.array([r for _, _, r, _ in found], dtype=ROLE_DTYPE)
    return bounds, roles


def _probe_end_of_turn(template: ChatTemplate, added: Sequence[str]) -> str:
    """The added token the template writes right after an assistant's content."""
    marks = _placeholders(2, template.source)
    probe = [{"role": "user", "content": marks[0]}, {"role": "assistant", "content": marks[1]}]
    try:
        text = template.render(probe)
    except Exception as error:
        raise DataError(f"{template.name}: cannot probe its end of turn (the template fails "
                        f"on a user and an assistant message: {error}); name it with "
                        "end_of_turn") from None
    at = text.find(marks[1])
    rest = text[at + len(marks[1]):] if at >= 0 else ""
    following = [token for token in added if token and rest.startswith(token)]
    if at < 0 or not following:
        raise DataError(f"{template.name}: no added token of the tokenizer follows an "
                        f"assistant's content (it is followed by {rest[:30]!r}); name the end "
                        "of turn with end_of_turn")
    return max(following, key=len)


def end_of_turn_of(template: ChatTemplate, tokenizer) -> str:
    """The template's assistant end of turn with ``tokenizer``: ``template.end_of_turn``,
    else the added token the template writes right after an assistant's content (a
    DataError naming the template when there is none)."""
    if template.end_of_turn is not None:
        return template.end_of_turn
    rust = load_tokenizer_object(tokenizer)
    added = [token.content for token in rust.get_added_tokens_decoder().values()]
    return _probe_end_of_turn(template, added)


def encode_each(
    conversations: Sequence[Sequence[dict]],
    template: ChatTemplate,
    tokenizer,
    *,
    stop_at_first: bool = False,
    fast: ByteOffsets | None = None,
) -> list[tuple[np.ndarray, np.ndarray] | str]:
    """Per conversation: its int32 [T] ids and uint8 [T] ``Role`` codes (proven as the
    module docstring says), or the reason they cannot be proven (a string). With
    ``stop_at_first`` the conversations after the first unprovable one are not encoded
    (their entries are None). ``fast``: the :func:`fast_path` of ``tokenizer`` (ids from
    its proven encoder, byte offsets from the tokens' byte lengths); the texts it does not
    take, and every text without it, are encoded by ``tokenizers`` with offsets."""
    rust = load_tokenizer_object(tokenizer)
    offsets_tokenizer = _without_post_processor(rust)
    end_of_turn = end_of_turn_of(template, rust)
    results: list = [None] * len(conversations)
    texts: list[str] = []
    spans: list[tuple[np.ndarray, np.ndarray]] = []
    kept: list[int] = []
    for i, messages in enumerate(conversations):
        try:
            text = template.render(messages)
        except Exception as error:  # the template refusing it (raise_exception, ...)
            results[i] = f"the template fails on it: {error}"
        else:
            try:
                spans.append(_spans(template, messages, text, end_of_turn))
                texts.append(text)
                kept.append(i)
            except _UnprovableError as why:
                results[i] = str(why)
        if results[i] is not None and stop_at_first:
            return results
    # per text: (ids, offsets, in bytes?) from the fast path, else from tokenizers
    encoded: list = fast.encode(texts) if fast is not None else [None] * len(texts)
    rest = [k for k, found in enumerate(encoded) if found is None]
    if rest:
        encodings = offsets_tokenizer.encode_batch([texts[k] for k in rest],
                                                   add_special_tokens=False)
        for k, encoding in zip(rest, encodings):
            encoded[k] = (np.asarray(encoding.ids, dtype=np.int32),
                          np.asarray(encoding.offsets, dtype=np.int64).reshape(-1, 2))
    in_bytes = np.ones(len(texts), bool)
    in_bytes[rest] = False

    def decode(ids: np.ndarray) -> str:
        return rust.decode(ids.tolist(), skip_special_tokens=False)

    for i, text, (bounds, span_roles), (ids, offsets), bytewise in zip(
            kept, texts, spans, encoded, in_bytes.tolist()):
        edges = _byte_bounds(text, bounds) if bytewise else bounds
        roles, straddling = token_roles(offsets, edges, span_roles)
        reason: str | None
        if straddling.size:
            t = int(straddling[0])
            start, stop = offsets[t].tolist()
            piece = (text.encode("utf-8")[start:stop].decode("utf-8", "replace") if bytewise
                     else text[start:stop])
            reason = f"token {t} ({piece!r}) straddles the edge of a content span"
        else:
            reason = check_roles(ids, roles, expected_pieces(text, bounds, span_roles),
                                 decode)
        results[i] = (ids, roles) if reason is None else reason
        if reason is not None and stop_at_first:
            return results
    return results


def encode_conversations(
    conversations: Sequence[Sequence[dict]],
    template: ChatTemplate,
    tokenizer,
    *,
    on_unprovable: str = "refuse",
    where: Sequence[str] | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray], int]:
    """Each conversation's int32 [T] ids and uint8 [T] ``Role`` codes (proven as the module
    docstring says), and how many were skipped. ``on_unprovable``: ``"refuse"`` (a
    DataError naming the first unprovable conversation by ``where``) or ``"skip"``."""
    if on_unprovable not in ("refuse", "skip"):
        raise DataError(f"on_unprovable: {on_unprovable!r} is not 'refuse' or 'skip'")
    if where is not None and len(where) != len(conversations):
        raise DataError(f"where: {len(where)} names for {len(conversations)} conversations")
    names = list(where) if where is not None else [f"conversation {i}"
                                                   for i in range(len(conversations))]
    results = encode_each(conversations, template, tokenizer,
                          stop_at_first=on_unprovable == "refuse")
    out_ids: list[np.ndarray] = []
    out_roles: list[np.ndarray] = []
    skipped = 0
    for name, result in zip(names, results):
        if isinstance(result, str):
            if on_unprovable == "refuse":
                raise DataError(f"{name}: the conversation's roles cannot be proven with "
                                f"{template.name}: {result}")
            skipped += 1
        elif result is not None:
            out_ids.append(result[0])
            out_roles.append(result[1])
    return out_ids, out_roles, skipped
