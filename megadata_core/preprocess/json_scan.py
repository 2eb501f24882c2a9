"""Which lines of a JSON-lines block Python's ``json`` reads as a native reader does, found
with array operations (no Python per line).

A native reader (gigatoken's ``JsonlFileSource``) takes a line's key lazily: it does not
validate the rest of the line, takes the first of duplicate keys and stops at the first
line it cannot read. Python's ``json.loads`` (what ``records.parse_record`` runs) rejects
any invalid line and takes the last duplicate. :func:`scan_block` marks a line **native**
only when, whatever the native reader does, Python's answer is known to be the same text:

* the line is valid UTF-8 (as ``bytes.decode`` checks it: no overlong forms, surrogates or
  code points past U+10FFFF) and valid JSON by the grammar Python's decoder implements
  (strict strings: no raw control characters; escapes ``\\" \\\\ \\/ \\b \\f \\n \\r \\t
  \\uXXXX``; numbers, ``true``, ``false``, ``null``; whitespace ``' \\t\\r'``), with an
  object at the top; NaN/Infinity (accepted by Python, not by every reader) are left to
  Python;
* each wanted key appears exactly once among the top-level keys, written literally (no
  top-level key holds an escape, so none can spell a wanted key another way), and holds a
  string;
* no ``\\u`` escape is a lone surrogate (Python keeps it, then ``check_unicode`` refuses
  the text).

A native line holding a character in ``unproven`` (code point ranges where the native
encoder is not proven to give the reference ids) is marked **reference**: the native reader
reads it as Python does, but its texts must be encoded by the tokenizer's own ``encode``.

How: one ``bytes.translate`` pass finds quotes, backslashes, newlines, control and
non-ASCII bytes; backslash runs decide which quotes are escaped; the remaining quotes pair
into strings; the bytes outside strings (a few per line: structure, numbers) are lexed
into tokens, and the grammar is checked on adjacent token pairs with each token's
container (object or array) found from bracket depths. Everything else (empty lines
aside) goes to the exact Python path, so a native line is a promise, a non-native one only
a cost.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# line kinds: native reader, empty (b""), Python's path, native reader but the texts encoded
# by the tokenizer (a character in ``unproven``)
NATIVE, EMPTY, EXACT, REFERENCE = 0, 1, 2, 3

# one translate pass: quote 1, backslash 2, newline 3, other control byte 4, non-ASCII 5
_marks = bytearray(256)
_marks[ord('"')] = 1
_marks[ord("\\")] = 2
for _byte in range(32):
    _marks[_byte] = 4
_marks[ord("\n")] = 3
for _byte in range(128, 256):
    _marks[_byte] = 5
_MARKS = bytes(_marks)

# bytes outside strings: token classes
_WS, _LBRACE, _RBRACE, _LBRACKET, _RBRACKET, _COLON, _COMMA, _STR, _SCALAR, _EOL, _BAD = range(11)
_OUTSIDE = np.full(256, _BAD, np.int8)
_OUTSIDE[[ord(" "), ord("\t"), ord("\r")]] = _WS
for _char, _class in zip("{}[]:,\"\n", (_LBRACE, _RBRACE, _LBRACKET, _RBRACKET, _COLON,
                                        _COMMA, _STR, _EOL)):
    _OUTSIDE[ord(_char)] = _class
for _char in "0123456789+-.abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ":
    _OUTSIDE[ord(_char)] = _SCALAR

_ESCAPES = np.zeros(256, bool)
_ESCAPES[[ord(c) for c in '"\\/bfnrtu']] = True
_HEX = np.full(256, -1, np.int32)
for _index, _char in enumerate("0123456789abcdef"):
    _HEX[ord(_char)] = _index
    _HEX[ord(_char.upper())] = _index

# Python's json NUMBER_RE, and the literals (NaN and the infinities are left to Python)
_SCALAR_TEXT = rb"(?:-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null)"
_SCALARS = re.compile(rb"(?:" + _SCALAR_TEXT + rb"\n)*")
_ONE_SCALAR = re.compile(_SCALAR_TEXT)
_MAX_SCALAR = 100  # longer numbers go to Python (it refuses integers past 4300 digits)
MAX_DEPTH = 100  # deeper nesting goes to Python (its decoder recurses)
_MAX_BLOCK = 1 << 40  # positions and depths share one int64 key


@dataclass
class LineScan:
    """Lines of a block: byte ``starts``/``ends`` (end before the newline) and ``kinds``
    (NATIVE, EMPTY, EXACT or REFERENCE per line)."""

    starts: np.ndarray
    ends: np.ndarray
    kinds: np.ndarray

    @property
    def lines(self) -> int:
        return int(self.kinds.size)


def _line_bounds(data: bytes, newlines: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the lines of ``data`` as iterating a binary file yields them
    (split after each ``\\n``; a last line without one counts)."""
    if newlines is None:
        newlines = np.flatnonzero(np.frombuffer(data, np.uint8) == 10)
    size = len(data)
    ends = newlines.astype(np.int64)
    if size and data[-1:] != b"\n":
        ends = np.append(ends, size)
    starts = np.concatenate([[0], newlines[: ends.size - 1] + 1]).astype(np.int64)
    return starts[: ends.size], ends


def scan_block(
    data: bytes, keys: Sequence[str], unproven: np.ndarray | None = None
) -> LineScan:
    """Classify each line of ``data`` (see the module docstring). ``unproven``: int64
    [k, 2] sorted, disjoint code point ranges [start, stop)."""
    if len(data) >= _MAX_BLOCK:
        raise ValueError(f"scan_block: a block of {len(data)} bytes is too large")
    a = np.frombuffer(data, np.uint8)
    marks = np.frombuffer(data.translate(_MARKS), np.uint8)
    special = np.flatnonzero(marks.view(bool))  # (a bool view: the faster nonzero)
    kinds_at = marks[special]
    quotes, backslashes, newlines, controls, high = (special[kinds_at == k] for k in range(1, 6))
    starts, ends = _line_bounds(data, newlines)
    lines = ends.size
    bad = np.zeros(lines, bool)
    if not lines:
        return LineScan(starts, ends, np.zeros(0, np.int8))

    def mark(positions: np.ndarray) -> None:
        if positions.size:
            bad[np.searchsorted(newlines, positions)] = True

    escaped, points = _escapes(a, backslashes, mark)
    if escaped.size and quotes.size:  # escaped quotes open or close no string
        quotes = quotes[~_escaped(a, quotes, escaped)]
    opens, closes, outside = _strings(quotes, len(data), bad, None)
    if outside is None or np.count_nonzero(a[outside[0]] == 10) != newlines.size:
        # a string crossed a line end: pair the quotes within each line instead
        line_of = np.searchsorted(newlines, quotes)
        opens, closes, outside = _strings(quotes, len(data), bad, line_of)
    segments, markers = outside
    content = _grammar(a, data, segments, markers, opens, closes, backslashes, keys, bad, mark)
    if controls.size:  # tab and CR are whitespace outside strings; other controls never
        soft = (a[controls] == 9) | (a[controls] == 13)
        mark(controls[~soft])
        soft_positions = controls[soft]
        mark(soft_positions[_inside(soft_positions, opens, closes)])
    if high.size:
        decoded = _utf8(a, high, mark)
        points = decoded if points is None else tuple(
            np.concatenate([mine, theirs]) for mine, theirs in zip(points, decoded))
    holds_unproven = np.zeros(lines, bool)
    if unproven is not None and len(unproven) and points is not None:
        code, where = points
        slot = np.searchsorted(unproven[:, 0], code, side="right") - 1
        risky = where[(slot >= 0) & (code < unproven[np.maximum(slot, 0), 1])]
        holds_unproven[np.searchsorted(newlines, risky)] = True
    kinds = np.where(bad | ~content, EXACT, np.where(holds_unproven, REFERENCE, NATIVE))
    kinds = kinds.astype(np.int8)
    kinds[ends == starts] = EMPTY
    return LineScan(starts, ends, kinds)


def _inside(positions: np.ndarray, opens: np.ndarray, closes: np.ndarray) -> np.ndarray:
    """Whether each position lies within a string [open, close]."""
    if not positions.size or not opens.size:
        return np.zeros(positions.size, bool)
    slot = np.searchsorted(opens, positions, side="right") - 1
    return (slot >= 0) & (positions <= closes[np.maximum(slot, 0)])


def _escaped(a: np.ndarray, quotes: np.ndarray, escaped: np.ndarray) -> np.ndarray:
    """Which ``quotes`` are escaped characters (``escaped``: all of them, sorted): those
    after a backslash, but for the few after two, looked up among ``escaped``."""
    before = a[np.maximum(quotes - 1, 0)] == 92
    before[quotes == 0] = False
    doubt = np.flatnonzero(before & (a[np.maximum(quotes - 2, 0)] == 92) & (quotes >= 2))
    if doubt.size:  # after a run of backslashes: escaped only when the last starts one
        where = np.minimum(np.searchsorted(escaped, quotes[doubt]), escaped.size - 1)
        before[doubt] = escaped[where] == quotes[doubt]
    return before


def _run_offsets(backslashes: np.ndarray, follows: np.ndarray) -> np.ndarray:
    """For the backslashes at indices ``follows`` (each right after another), how far
    each is from the start of its run."""
    offset = np.ones(follows.size, np.int64)
    active = np.flatnonzero(follows > 1)
    while active.size:  # a few steps: runs are short
        index = follows[active] - offset[active] - 1
        longer = backslashes[index] == backslashes[index + 1] - 1
        active = active[longer]
        offset[active] += 1
        active = active[follows[active] - offset[active] > 0]
    return offset


def _escapes(a: np.ndarray, backslashes: np.ndarray, mark):
    """Check every escape; returns (positions of the escaped characters, (code points,
    positions) of the ``\\u`` escapes or None). Invalid escapes and lone surrogates mark
    their lines."""
    if not backslashes.size:
        return np.zeros(0, np.int64), None
    size = a.size
    starters = backslashes
    follows = np.flatnonzero(backslashes[1:] == backslashes[:-1] + 1) + 1
    if follows.size:  # runs of backslashes: every other one starts an escape
        offset = _run_offsets(backslashes, follows)
        keep = np.ones(backslashes.size, bool)
        keep[follows[offset % 2 == 1]] = False
        starters = backslashes[keep]
    escaped = starters + 1  # the escaped characters
    beyond = escaped >= size
    if beyond.any():
        mark(starters[beyond])
        escaped = escaped[~beyond]
    chars = a[escaped]
    mark(escaped[~_ESCAPES[chars]])
    starts = escaped[chars == ord("u")] + 1  # first hex digit
    if not starts.size:
        return escaped, None
    short = starts + 4 > size
    mark(starts[short])
    starts = starts[~short]
    digits = _HEX[a[starts[:, None] + np.arange(4)]]
    invalid = (digits < 0).any(axis=1)
    mark(starts[invalid])
    units = (digits[:, 0] << 12) | (digits[:, 1] << 8) | (digits[:, 2] << 4) | digits[:, 3]
    units[invalid] = 0x20
    high = (units & 0xFC00) == 0xD800
    low = (units & 0xFC00) == 0xDC00
    adjacent = np.zeros(units.size, bool)  # escape i+1 starts right after escape i
    adjacent[:-1] = starts[1:] == starts[:-1] + 6
    paired_high = high & adjacent & np.append(low[1:], False)
    paired_low = low & np.insert(paired_high[:-1], 0, False)
    mark(starts[(high & ~paired_high) | (low & ~paired_low)])
    code = units.astype(np.int64)
    pair = np.flatnonzero(paired_high)
    code[pair] = 0x10000 + ((units[pair] - 0xD800) << 10) + (units[pair + 1] - 0xDC00)
    keep = ~paired_low & ~invalid
    return escaped, (code[keep], starts[keep])


def _strings(quotes: np.ndarray, size: int, bad: np.ndarray, line_of: np.ndarray | None):
    """String intervals from the unescaped quotes, and the positions of the bytes outside
    them (each string reduced to its opening quote, which stands for it).

    Pairs the quotes in order (``line_of`` None; outside None when their count is odd), or
    within each line (lines with an odd count are marked, their quotes dropped)."""
    if line_of is not None:
        counts = np.bincount(line_of, minlength=bad.size)
        odd = counts % 2 == 1
        bad |= odd
        keep = ~odd[line_of]
        quotes, line_of = quotes[keep], line_of[keep]
        first = (np.cumsum(counts * ~odd) - counts * ~odd)[line_of]
        rank = np.arange(quotes.size) - first
        opens, closes = quotes[rank % 2 == 0], quotes[rank % 2 == 1]
    elif quotes.size % 2:
        return None, None, None
    else:
        opens, closes = quotes[0::2], quotes[1::2]
    gap_starts = np.concatenate([[0], closes + 1])
    gap_lengths = np.concatenate([opens + 1, [size]]) - gap_starts
    markers = np.cumsum(gap_lengths[:-1]) - 1  # where each opening quote lands
    return opens, closes, (_segments(gap_starts, gap_lengths), markers)


def _segments(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ranges [starts[i], starts[i] + lengths[i]) as one int64 array."""
    total = int(lengths.sum())
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(starts - offsets, lengths) + np.arange(total, dtype=np.int64)


def _grammar(a, data, outside, markers, opens, closes, backslashes, keys, bad, mark):
    """Lex the bytes outside strings (``markers``: where the opening quotes are), check the
    grammar, the top-level object and the wanted keys, marking every line that fails;
    returns which lines hold any token."""
    classes = _OUTSIDE[a[outside]]
    stray = classes == _STR  # a quote that opens no string (an escaped one, a dropped one)
    stray[markers] = False
    classes[stray] = _BAD
    mark(outside[classes == _BAD])
    scalar = classes == _SCALAR
    run_start = scalar.copy()
    run_start[1:] &= ~scalar[:-1]
    _check_scalars(a, outside, scalar, run_start, mark)
    token = (classes != _WS) & (classes != _BAD) & (~scalar | run_start)
    at = np.flatnonzero(token)
    types = classes[at]
    where = outside[at]
    if not data.endswith(b"\n"):  # the last line's end
        types = np.append(types, np.int8(_EOL))
        where = np.append(where, len(data))
    is_eol = types == _EOL
    line = np.cumsum(is_eol) - is_eol
    content = np.zeros(bad.size, bool)
    content[line[~is_eol]] = True
    delta = np.zeros(types.size, np.int64)
    delta[(types == _LBRACE) | (types == _LBRACKET)] = 1
    delta[(types == _RBRACE) | (types == _RBRACKET)] = -1
    total = np.cumsum(delta)
    after = total - np.concatenate([[0], total[is_eol]])[line]
    before = after - delta
    first = np.ones(types.size, bool)
    first[1:] = is_eol[:-1]
    wrong = (after < 0) | (after > MAX_DEPTH) | (is_eol & (after != 0))
    wrong |= ~is_eol & first & (types != _LBRACE)  # an object at the top ...
    wrong |= ~is_eol & ~first & (before == 0)  # ... and nothing else on the line
    bad[line[wrong]] = True
    ok = ~bad[line]
    opener = ok & (delta == 1)
    closer = ok & (delta == -1)
    level = np.where(opener, before, after)
    brackets = np.flatnonzero(opener | closer)
    order = brackets[np.argsort(level[brackets] * _MAX_BLOCK + where[brackets], kind="stable")]
    pairs = order.reshape(-1, 2)  # per level, balanced lines alternate opener and closer
    mismatch = (types[pairs[:, 0]] == _LBRACE) != (types[pairs[:, 1]] == _RBRACE)
    bad[line[pairs[mismatch, 0]]] = True
    # the container of each token: the last opener one level up, before it
    context = np.clip(np.where(closer, after, before) - 1, -1, MAX_DEPTH + 1)
    in_object = np.zeros(types.size, bool)
    openers = np.flatnonzero(opener)
    if openers.size:
        keyed = level[openers] * _MAX_BLOCK + where[openers]
        sort = np.argsort(keyed, kind="stable")
        slot = np.searchsorted(keyed[sort], np.maximum(context, 0) * _MAX_BLOCK + where) - 1
        container = openers[sort[np.maximum(slot, 0)]]
        inside = ok & (context >= 0)
        lost = inside & ((slot < 0) | (level[container] != context))
        bad[line[lost]] = True
        in_object = inside & (types[container] == _LBRACE)
    _check_pairs(types, in_object, context, line, bad)
    _check_keys(a, types, in_object, context, line, content, opens, closes, backslashes,
                keys, bad)
    return content


def _check_scalars(a, outside, scalar, run_start, mark) -> None:
    """Numbers and literals outside strings must be what Python's decoder reads."""
    starts = np.flatnonzero(run_start)
    if not starts.size:
        return
    run_id = np.cumsum(run_start) - 1
    lengths = np.bincount(run_id[scalar], minlength=starts.size)
    mark(outside[starts[lengths > _MAX_SCALAR]])
    text = np.insert(a[outside[scalar]], np.cumsum(lengths), ord("\n")).tobytes()
    if _SCALARS.fullmatch(text):
        return
    for number, piece in enumerate(text.split(b"\n")[:-1]):  # on failure only: which runs
        if not _ONE_SCALAR.fullmatch(piece):
            mark(outside[starts[number : number + 1]])


# what may follow each token: value starts, and the tokens ending a value
_VALUE_START = np.zeros(11, bool)
_VALUE_START[[_STR, _SCALAR, _LBRACE, _LBRACKET]] = True


def _check_pairs(types, in_object, context, line, bad) -> None:
    """Each adjacent token pair must be one the JSON grammar allows."""
    nxt = np.append(types[1:], np.int8(_EOL))
    prev = np.insert(types[:-1], 0, np.int8(_EOL))
    key = (types == _STR) & ((prev == _LBRACE) | ((prev == _COMMA) & in_object))
    value_end = ((types == _STR) & ~key) | (types == _SCALAR) | (types == _RBRACE) | (
        types == _RBRACKET)
    good = np.ones(types.size, bool)
    brace = types == _LBRACE
    good[brace] = (nxt[brace] == _STR) | (nxt[brace] == _RBRACE)
    bracket = types == _LBRACKET
    good[bracket] = _VALUE_START[nxt[bracket]] | (nxt[bracket] == _RBRACKET)
    colon = types == _COLON
    good[colon] = _VALUE_START[nxt[colon]]
    comma = types == _COMMA
    good[comma] = (context[comma] >= 0) & np.where(
        in_object[comma], nxt[comma] == _STR, _VALUE_START[nxt[comma]])
    good[key] = nxt[key] == _COLON
    top = value_end & (context < 0)
    good[top] = nxt[top] == _EOL
    inner = value_end & (context >= 0)
    closer = np.where(in_object[inner], _RBRACE, _RBRACKET)
    good[inner] = (nxt[inner] == _COMMA) | (nxt[inner] == closer)
    bad[line[~good]] = True


def _check_keys(a, types, in_object, context, line, content, opens, closes, backslashes,
                keys, bad) -> None:
    """Each wanted key once among the top-level keys, written literally, holding a string;
    no top-level key with an escape (it could spell a wanted key)."""
    prev = np.insert(types[:-1], 0, np.int8(_EOL))
    strings = np.cumsum(types == _STR) - 1
    at = np.flatnonzero((types == _STR) & (context == 0) & in_object & (
        (prev == _LBRACE) | (prev == _COMMA)))
    first, last = opens[strings[at]], closes[strings[at]]
    if backslashes.size and at.size:
        escaped = np.searchsorted(backslashes, last) > np.searchsorted(backslashes, first)
        bad[line[at[escaped]]] = True
    length = last - first - 1
    for key in keys:
        raw = np.frombuffer(key.encode("utf-8"), np.uint8)
        if (raw < 32).any() or (raw == ord('"')).any() or (raw == ord("\\")).any():
            bad[content] = True  # such a key is never written literally
            continue
        candidates = np.flatnonzero(length == raw.size)
        equal = (a[first[candidates, None] + 1 + np.arange(raw.size)] == raw).all(axis=1)
        found = at[candidates[equal]]
        count = np.bincount(line[found], minlength=bad.size)
        value = np.minimum(found + 2, types.size - 1)  # key, colon, value
        holds = np.zeros(bad.size, bool)
        holds[line[found]] = types[value] == _STR
        bad |= content & ((count != 1) | ~holds)


def _utf8(a: np.ndarray, high: np.ndarray, mark) -> tuple[np.ndarray, np.ndarray]:
    """Check the UTF-8 sequences made of the non-ASCII bytes at ``high``; returns their
    (code points, positions). Invalid sequences mark their lines."""
    value = a[high].astype(np.int64)
    count = high.size
    cont = (value & 0xC0) == 0x80
    need = np.select([(value >= 0xC2) & (value <= 0xDF), (value & 0xF0) == 0xE0,
                      (value >= 0xF0) & (value <= 0xF4)], [1, 2, 3], 0)
    lead = ~cont
    mark(high[lead & (need == 0)])  # C0, C1, F5-FF
    claimed = np.zeros(count, bool)
    code = np.where(need == 1, value & 0x1F, np.where(need == 2, value & 0x0F, value & 0x07))
    ok = lead & (need > 0)
    for k in (1, 2, 3):
        wants = ok & (need >= k)
        index = np.flatnonzero(wants) + k
        fits = index < count
        follow = np.zeros(count, bool)
        follow[np.flatnonzero(wants)[fits]] = (high[index[fits]] == high[index[fits] - k] + k) & (
            cont[index[fits]])
        broken = wants & ~follow
        mark(high[broken])
        ok &= ~broken
        good = np.flatnonzero(wants & follow)
        claimed[good + k] = True
        code[good] = (code[good] << 6) | (value[good + k] & 0x3F)
    mark(high[cont & ~claimed])
    second = np.flatnonzero(ok) + 1
    firsts = value[second - 1]
    seconds = value[np.minimum(second, count - 1)]
    out_of_range = ((firsts == 0xE0) & (seconds < 0xA0)) | ((firsts == 0xED) & (seconds > 0x9F)) | (
        (firsts == 0xF0) & (seconds < 0x90)) | ((firsts == 0xF4) & (seconds > 0x8F))
    mark(high[second[out_of_range] - 1])
    good = np.flatnonzero(ok)
    return code[good], high[good]


def exact_rows(data: np.ndarray, offsets: np.ndarray, unproven: np.ndarray | None) -> np.ndarray:
    """For texts ``data[offsets[i]:offsets[i + 1]]`` (uint8 UTF-8, as a table's string
    column holds them): which must take the exact path, for invalid UTF-8 or a character
    in ``unproven``."""
    rows = max(offsets.size - 1, 0)
    flagged = np.zeros(rows, bool)
    if not rows:
        return flagged
    data = np.asarray(data, np.uint8)
    first, last = int(offsets[0]), int(offsets[-1])
    high = np.flatnonzero(data[first:last] >= 0x80) + first
    if not high.size:
        return flagged

    def mark(positions: np.ndarray) -> None:
        if positions.size:
            flagged[np.searchsorted(offsets, positions, side="right") - 1] = True

    code, where = _utf8(data, high, mark)
    starts = offsets[1:-1]  # a sequence must not run from one text into the next
    split = np.flatnonzero((offsets[2:] > starts) & ((data[np.minimum(starts, data.size - 1)]
                                                      & 0xC0) == 0x80)) + 1
    flagged[split] = True
    flagged[split - 1] = True
    if unproven is not None and len(unproven):
        slot = np.searchsorted(unproven[:, 0], code, side="right") - 1
        mark(where[(slot >= 0) & (code < unproven[np.maximum(slot, 0), 1])])
    return flagged
