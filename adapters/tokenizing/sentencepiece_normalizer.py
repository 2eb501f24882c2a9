"""SentencePiece's normalizer as array operations over UTF-8 texts, for the models whose
character map it provably reproduces.

sentencepiece normalizes a text (``normalizer.cc``) by walking it left to right: at each
position it takes the longest key of the model's precompiled character map (a darts-clone
double-array trie of UTF-8 byte strings, each with a NUL-ended replacement) that the text
starts with there, emits its replacement and moves past it; where no key starts, it emits
the character as it is. With ``remove_extra_whitespaces`` a space is dropped when the
replacement it is in begins the output or follows a space, and the output's trailing
space symbols are dropped; then spaces become ``▁`` and, with ``add_dummy_prefix``, a
``▁`` goes in front of a text that is not empty.

:func:`read_charsmap` reads every entry of the trie (a breadth-first walk over all 256
labels of every node, as numpy arrays). :class:`Normalizer` then does the walk without a
Python loop per character, proven as follows:

* a text holding two adjacent characters that begin a key of several characters might
  match one; those texts (``reference`` rows) go to sentencepiece itself. Everywhere else
  only keys of one character can match, so the longest match at a character is that
  character's key: the walk is a replacement per character (``bytes.translate`` for
  ASCII keys replaced by at most one ASCII byte, a splice of the others);
* the whitespace rule, applied per replacement in sentencepiece, equals "drop every space
  at a text's start or after a space" over the replaced text when no replacement holds
  two spaces in a row (checked): a space inside a replacement after a non-space is kept
  by both, and runs are cut alike across replacements (empty ones included);
* sentencepiece's trailing removal strips ``▁`` symbols after escaping, so it also strips
  ``▁`` characters the text itself ends with: this strips every trailing space and
  U+2581; gigatoken then prepends ``▁`` to a text that is not empty and turns spaces into
  ``▁`` (the identity normalizer the BPE proof covers). sentencepiece prepends before it
  strips: a text reduced to spaces and ``▁`` ends empty in both;
* without whitespace removal the dummy prefix depends on the raw text being non-empty:
  a text whose replacements are all empty goes to the reference (gigatoken would prepend
  nothing).

:meth:`Normalizer.prove` checks at load, against sentencepiece's own ``normalize``: every
entry of the map alone, through this module's arrays; the keys of several characters (so
the trie was read as sentencepiece reads it); and every code point the map does not hold,
unchanged.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["Normalizer", "read_charsmap"]

MAX_KEY_BYTES = 32  # sentencepiece reads at most 32 prefix matches (kMaxTrieResultsSize)
MAX_FRONTIER = 1 << 22
CODE_POINTS = 0x110000
_UNITS_LEAF = 1 << 31
_TABLES = {"ascii": np.uint8, "deleted": np.uint8, "singles": np.int64, "values": np.uint8,
           "value_offsets": np.int64, "pairs": np.int64}


def read_charsmap(blob: bytes) -> tuple[list[str], list[str]]:
    """(keys, replacements) of every entry of a precompiled character map (``<trie bytes:
    uint32 LE><double array: uint32 units><NUL-ended replacements>``) that sentencepiece's
    ``commonPrefixSearch`` can match. ValueError when it cannot be read or an entry is not
    UTF-8."""
    if len(blob) < 4:
        raise ValueError("shorter than its 4-byte trie size")
    size = struct.unpack_from("<I", blob)[0]
    if size % 4 or 4 + size > len(blob) or not size:
        raise ValueError(f"trie size {size} does not fit {len(blob)} bytes")
    units = np.frombuffer(blob, "<u4", size // 4, 4).astype(np.int64)
    strings = np.frombuffer(blob, np.uint8, offset=4 + size)
    offset = (units >> 10) << ((units & (1 << 9)) >> 6)
    label = units & (_UNITS_LEAF | 0xFF)
    has_leaf = (units >> 8) & 1
    labels = np.arange(256, dtype=np.int64)
    nodes, keys = np.array([offset[0]], np.int64), np.zeros((1, 0), np.uint8)
    found_keys, found_values = [], []
    while nodes.size:  # one step per key byte: every node's 256 labels at once
        if (nodes >= units.size).any():  # (the root's too)
            raise ValueError("a node points past the trie")
        if keys.shape[1] == MAX_KEY_BYTES:
            raise ValueError(f"a key is longer than {MAX_KEY_BYTES} bytes")
        # darts-clone shares suffixes (a node has several paths): labels tried per node
        unique, path_of = np.unique(nodes, return_inverse=True)
        child = unique[:, None] ^ labels[None, :]
        inside = child < units.size
        child = np.where(inside, child, 0)
        node_row, node_byte = np.nonzero(inside & (label[child] == labels[None, :]))
        if (node_byte == 0).any():
            raise ValueError("a key holds the byte 0")
        # each path of a node times each of its children
        per_node = np.bincount(node_row, minlength=unique.size)
        first = np.cumsum(per_node) - per_node
        count = per_node[path_of]
        row = np.repeat(np.arange(nodes.size), count)
        pick = np.repeat(first[path_of], count) + _within(count)
        byte = node_byte[pick]
        reached = child[node_row[pick], byte]
        nodes = reached ^ offset[reached]
        if (nodes >= units.size).any():
            raise ValueError("a node points past the trie")
        if nodes.size > MAX_FRONTIER:  # (darts-clone shares suffixes: a node has paths)
            raise ValueError(f"more than {MAX_FRONTIER} keys of {keys.shape[1] + 1} bytes")
        keys = np.concatenate([keys[row], byte.astype(np.uint8)[:, None]], axis=1)
        leaf = has_leaf[reached].astype(bool)
        found_keys.append(keys[leaf])
        found_values.append(units[nodes[leaf]] & (_UNITS_LEAF - 1))
    starts = np.concatenate(found_values).astype(np.int64)
    nul = np.flatnonzero(strings == 0)
    slot = np.searchsorted(nul, starts)
    if (starts >= strings.size).any() or (slot >= nul.size).any():
        raise ValueError("a replacement is not NUL-ended")
    ends = nul[slot]
    # keys and replacements hold no NUL: each ended by one, decoded at once, split again
    ended = [np.concatenate([m, np.zeros((len(m), 1), np.uint8)], axis=1).reshape(-1)
             for m in found_keys]
    joined = np.concatenate(ended).tobytes()[:-1]
    values = _gather_segments(strings, starts, ends - starts + 1).tobytes()[:-1]
    try:
        keys_found, values_found = joined.decode("utf-8"), values.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"an entry is not UTF-8 ({error})") from None
    if not starts.size:
        return [], []
    return keys_found.split("\0"), values_found.split("\0")


class Normalizer:
    """sentencepiece's normalizer of one model over texts as UTF-8 arrays (see the module
    docstring). Build with :meth:`build`, which returns (None, why) for maps the proof does
    not cover."""

    def __init__(self, tables: dict[str, np.ndarray], *, remove_extra_whitespaces: bool,
                 add_dummy_prefix: bool, keys: list[str] | None = None,
                 values: list[str] | None = None) -> None:
        """``tables`` (:meth:`tables`'s arrays): ``ascii`` uint8[256] the translation of
        ASCII keys replaced by at most one ASCII byte, ``deleted`` uint8 the ASCII keys
        replaced by nothing, ``singles`` int64 the other one-character keys' code points,
        ``values`` uint8 and ``value_offsets`` int64 their replacements, ``pairs`` int64
        the first two code points (a * 0x110000 + b) of the keys of several characters.
        ``keys``/``values``: every entry, for :meth:`prove`."""
        self.remove_extra_whitespaces = remove_extra_whitespaces
        self.add_dummy_prefix = add_dummy_prefix
        self.keys, self.values = keys, values
        self._tables = tables
        self._ascii_table = tables["ascii"].tobytes()
        self._ascii_deleted = tables["deleted"].tobytes()
        self._ascii_identity = self._ascii_table == bytes(range(256)) and not self._ascii_deleted
        singles = tables["singles"]
        self._single = np.full(CODE_POINTS, -1, np.int32)  # code point -> replacement index
        self._single[singles] = np.arange(singles.size, dtype=np.int32)
        self._values, self._value_offsets = tables["values"], tables["value_offsets"]
        self._spliced_ascii = np.zeros(128, bool)
        self._spliced_ascii[singles[singles < 128]] = True
        self._pairs = tables["pairs"]
        self._second = np.zeros(CODE_POINTS, bool)
        self._second[self._pairs % CODE_POINTS] = True

    def tables(self) -> bytes:
        """This normalizer's arrays as ``.npz`` bytes (:meth:`from_tables` reads them)."""
        stream = io.BytesIO()
        np.savez(stream, **self._tables)
        return stream.getvalue()

    @classmethod
    def from_tables(cls, data: bytes, *, remove_extra_whitespaces: bool,
                    add_dummy_prefix: bool) -> Normalizer | None:
        """The normalizer whose :meth:`tables` gave ``data``, or None when they are not."""
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as stored:
                tables = {name: stored[name] for name in _TABLES}
        except (OSError, ValueError, KeyError, EOFError):
            return None
        if any(tables[name].dtype != dtype for name, dtype in _TABLES.items()):
            return None
        if (tables["ascii"].size != 256
                or tables["value_offsets"].size != tables["singles"].size + 1):
            return None
        return cls(tables, remove_extra_whitespaces=remove_extra_whitespaces,
                   add_dummy_prefix=add_dummy_prefix)

    @classmethod
    def from_entries(cls, keys: list[str], values: list[str], *,
                     remove_extra_whitespaces: bool, add_dummy_prefix: bool) -> Normalizer:
        """The normalizer of a character map's entries (keys and replacements)."""
        table = bytearray(range(256))
        deleted = bytearray()
        singles, replacements = [], []
        for key, value in zip(keys, values):
            if len(key) != 1:
                continue
            if key < "\x80" and len(value) <= 1 and value < "\x80":
                if value:
                    table[ord(key)] = ord(value)
                else:
                    deleted.append(ord(key))
            else:
                singles.append(ord(key))
                replacements.append(value.encode("utf-8"))
        # the first two code points of each key: the keys as UTF-32, each ended by a 0
        points = np.frombuffer("\0".join(keys).encode("utf-32-le"), np.uint32).astype(np.int64)
        starts = np.concatenate([[0], np.flatnonzero(points == 0) + 1])[: len(keys)]
        seconds = np.append(points, 0)[starts + 1]
        several = seconds != 0
        tables = {
            "ascii": np.frombuffer(bytes(table), np.uint8),
            "deleted": np.frombuffer(bytes(deleted), np.uint8),
            "singles": np.array(singles, np.int64),
            "values": np.frombuffer(b"".join(replacements), np.uint8),
            "value_offsets": np.concatenate(
                [[0], np.cumsum([len(v) for v in replacements], dtype=np.int64)]).astype(np.int64),
            "pairs": np.unique(points[starts[several]] * CODE_POINTS + seconds[several]),
        }
        return cls(tables, remove_extra_whitespaces=remove_extra_whitespaces,
                   add_dummy_prefix=add_dummy_prefix, keys=keys, values=values)

    # -- building and proving ------------------------------------------------------------

    @classmethod
    def build(cls, charsmap: bytes, *, remove_extra_whitespaces: bool,
              add_dummy_prefix: bool) -> tuple[Normalizer | None, str]:
        """(normalizer, "") for a model's precompiled map and flags, or (None, why)."""
        try:
            keys, values = read_charsmap(charsmap) if charsmap else ([], [])
        except ValueError as error:
            return None, f"its character map could not be read ({error})"
        spaced = next((k for k in keys if " " in k), None) if " " in "".join(keys) else None
        if spaced is not None:
            return None, f"its character map has a key with a space ({spaced!r})"
        if remove_extra_whitespaces and "  " in "\0".join(values):
            doubled = next((k for k, v in zip(keys, values) if "  " in v), None)
            if doubled is not None:
                return None, f"its character map replaces {doubled!r} with two spaces in a row"
        normalizer = cls.from_entries(keys, values, add_dummy_prefix=add_dummy_prefix,
                                      remove_extra_whitespaces=remove_extra_whitespaces)
        if (normalizer._pairs % CODE_POINTS < 128).any():
            return None, "its character map has a key whose second character is ASCII"
        return normalizer, ""

    def prove(self, reference_normalize: Callable[[list[str]], list[str]]) -> str:
        """'' when sentencepiece's ``normalize`` (``reference_normalize(texts) -> texts``,
        the model's own, with its dummy prefix and whitespace rules) agrees: on every entry
        alone with the replacement this module read (so the trie was read as sentencepiece
        reads it), through this normalizer's arrays for the one-character keys (the keys
        of several go to the reference), and on every code point the map does not hold,
        unchanged; else what differs."""
        if self.keys is None or self.values is None:
            raise ValueError("prove: this normalizer was read from tables, not built from entries")
        theirs = reference_normalize(self.keys)
        for key, value, got in zip(self.keys, self.values, theirs):
            if self._alone(value) != got:
                return (f"sentencepiece normalizes {key!r} to {got!r}, its map read here "
                        f"gives {self._alone(value)!r}")
        singles = [(k, got) for k, got in zip(self.keys, theirs) if len(k) == 1]
        mine = self.finish(self.normalize_texts([k for k, _ in singles]))
        for (key, got), ours in zip(singles, mine):
            if ours is not None and ours != got:  # (None: left to sentencepiece)
                return f"the arrays normalize {key!r} to {ours!r}, sentencepiece to {got!r}"
        held = np.zeros(CODE_POINTS, bool)
        held[[ord(k) for k, _ in singles]] = True
        held[0xD800:0xE000] = held[0] = held[32] = True
        text = " ".join(map(chr, np.flatnonzero(~held).tolist()))
        got = reference_normalize([text])[0]
        if got != self._alone(text):
            want = self._alone(text)
            where = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), 0)
            return ("sentencepiece changes a code point its map does not hold "
                    f"({want[where:where + 3]!r} -> {got[where:where + 3]!r})")
        return ""

    def _alone(self, value: str) -> str:
        """sentencepiece's output for a text that is one replacement ``value`` (no two
        spaces in a row): its whitespace rules, escape and dummy prefix."""
        if self.remove_extra_whitespaces:
            value = value.lstrip(" ")
        out = value.replace(" ", "\u2581")
        if self.add_dummy_prefix:
            out = "\u2581" + out
        if self.remove_extra_whitespaces:
            out = out.rstrip("\u2581")
        return out

    def finish(self, normalized: Sequence[str | None]) -> list[str | None]:
        """What gigatoken's own normalizer does after :meth:`normalize` (for tests and the
        proof): ``▁`` before a text that is not empty, spaces as ``▁`` (None stays)."""
        prefix = "\u2581" if self.add_dummy_prefix else ""
        return [None if text is None else (prefix + text if text else text).replace(" ", "\u2581")
                for text in normalized]

    def normalize_texts(self, texts: Sequence[str]) -> list[str | None]:
        """:meth:`normalize` of Python strings (None for the texts it leaves to the
        reference)."""
        encoded = [text.encode("utf-8") for text in texts]
        offsets = np.concatenate([[0], np.cumsum([len(e) for e in encoded])]).astype(np.int64)
        data = np.frombuffer(b"".join(encoded), np.uint8)
        out, out_offsets, reference = self.normalize(data, offsets)
        raw = out.tobytes()
        return [None if reference[i] else raw[out_offsets[i] : out_offsets[i + 1]].decode()
                for i in range(len(texts))]

    # -- the arrays ----------------------------------------------------------------------

    def normalize(self, data: np.ndarray | bytes, offsets: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(uint8 normalized texts, int64[n + 1] their offsets, bool[n] rows left to the
        reference) of the valid UTF-8 texts ``data[offsets[i]:offsets[i + 1]]`` (uint8, or
        bytes: not copied). A normalized text is what gigatoken's prefix-and-escape
        normalizer takes next."""
        offsets = np.asarray(offsets, np.int64)
        given = data if isinstance(data, bytes) and not offsets[0] else None
        data = np.frombuffer(data, np.uint8) if isinstance(data, bytes) else np.asarray(
            data, np.uint8)
        if offsets[0]:
            data, offsets = data[offsets[0] : offsets[-1]], offsets - offsets[0]
        raw_lengths = np.diff(offsets)
        reference = np.zeros(offsets.size - 1, bool)
        leads = np.flatnonzero(data >= 0xC0)
        points, widths = _code_points(data, leads)
        if self._pairs.size:
            self._mark_pairs(data, offsets, leads, points, widths, reference)
        raw = given if given is not None and len(given) == data.size else data.tobytes()
        if not self._ascii_identity:
            translated = raw.translate(self._ascii_table, self._ascii_deleted)
            if len(translated) != len(raw):  # deleted bytes: offsets and leads move
                gone = np.flatnonzero(np.isin(data, np.frombuffer(self._ascii_deleted, np.uint8)))
                leads = leads - np.searchsorted(gone, leads)
                offsets = offsets - np.searchsorted(gone, offsets)
            raw = translated
        data = np.frombuffer(raw, np.uint8)
        hits = self._single[points] >= 0 if points.size else np.zeros(0, bool)
        if self._spliced_ascii.any():
            ascii_at = np.flatnonzero(self._spliced_ascii[np.minimum(data, 127)] & (data < 128))
            starts = np.concatenate([leads[hits], ascii_at])
            ids = np.concatenate([self._single[points[hits]], self._single[data[ascii_at]]])
            lengths = np.concatenate([widths[hits], np.ones(ascii_at.size, np.int64)])
            order = np.argsort(starts, kind="stable")
            starts, ids, lengths = starts[order], ids[order], lengths[order]
        else:
            starts, ids, lengths = leads[hits], self._single[points[hits]], widths[hits]
        if starts.size:
            data, offsets = _splice(data, offsets, starts, lengths, ids, self._values,
                                    self._value_offsets)
        if self.remove_extra_whitespaces:
            data, offsets = _collapse_spaces(data, offsets)
        elif self.add_dummy_prefix:  # sentencepiece prefixes a text emptied by its map
            reference |= (raw_lengths > 0) & (np.diff(offsets) == 0)
        return data, offsets, reference

    def _mark_pairs(self, data, offsets, leads, points, widths, reference) -> None:
        """Mark the rows holding two adjacent characters that begin a key of several."""
        candidates = np.flatnonzero(self._second[points]) if points.size else leads[:0]
        if not candidates.size:
            return
        where = leads[candidates]
        inside = where > 0
        previous = np.zeros(where.size, np.int64)
        # the character before: a lead that ends right here, else one ASCII byte
        earlier = candidates - 1
        clipped = np.maximum(earlier, 0)
        joined = (earlier >= 0) & (leads[clipped] + widths[clipped] == where)
        previous[joined] = points[earlier[joined]]
        single = ~joined & inside
        previous[single] = data[where[single] - 1]
        row = np.searchsorted(offsets, where, side="right") - 1
        inside &= where != offsets[row]
        codes = previous * CODE_POINTS + points[candidates]
        slot = np.minimum(np.searchsorted(self._pairs, codes), self._pairs.size - 1)
        found = inside & (self._pairs[slot] == codes)
        reference[row[found]] = True


def _code_points(data: np.ndarray, leads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int64 code points, int64 byte widths) of the characters starting at ``leads`` (the
    lead bytes of valid UTF-8)."""
    if not leads.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    first = data[leads].astype(np.int64)
    widths = np.where(first >= 0xF0, 4, np.where(first >= 0xE0, 3, 2))
    size = data.size
    b1 = data[np.minimum(leads + 1, size - 1)].astype(np.int64) & 0x3F
    b2 = data[np.minimum(leads + 2, size - 1)].astype(np.int64) & 0x3F
    b3 = data[np.minimum(leads + 3, size - 1)].astype(np.int64) & 0x3F
    points = np.where(
        widths == 2, ((first & 0x1F) << 6) | b1,
        np.where(widths == 3, ((first & 0x0F) << 12) | (b1 << 6) | b2,
                 ((first & 0x07) << 18) | (b1 << 12) | (b2 << 6) | b3))
    return points, widths


def _splice(data, offsets, starts, lengths, ids, values, value_offsets):
    """``data`` with ``data[starts[k]:starts[k] + lengths[k]]`` replaced by replacement
    ``ids[k]`` (sorted, disjoint spans), and the rows' new offsets."""
    new_lengths = (value_offsets[ids + 1] - value_offsets[ids]).astype(np.int64)
    delta = np.concatenate([[0], np.cumsum(new_lengths - lengths)])
    moved = offsets + delta[np.searchsorted(starts, offsets)]
    # segments: the bytes before each span, then its replacement; the rest after the last
    gap_starts = np.concatenate([[0], starts + lengths])
    gap_lengths = np.concatenate([starts, [data.size]]) - gap_starts
    source = np.concatenate([data, values])
    segment_starts = np.empty(2 * starts.size + 1, np.int64)
    segment_lengths = np.empty(2 * starts.size + 1, np.int64)
    segment_starts[0::2], segment_lengths[0::2] = gap_starts, gap_lengths
    segment_starts[1::2] = data.size + value_offsets[ids]
    segment_lengths[1::2] = new_lengths
    out = _gather_segments(source, segment_starts, segment_lengths)
    return out, moved


def _gather_segments(source: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``source[starts[k]:starts[k] + lengths[k]]`` for every k, concatenated (uint8)."""
    total = int(lengths.sum())
    if starts.size <= max(64, total >> 8):  # few segments: slices joined
        raw = memoryview(source)
        return np.frombuffer(b"".join(
            raw[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist())), np.uint8)
    keep = lengths > 0
    starts, lengths = starts[keep], lengths[keep]
    out_starts = np.cumsum(lengths) - lengths
    shift = np.zeros(total, np.int64)
    shift[out_starts] = np.diff(np.concatenate([[0], starts - out_starts]))
    index = np.cumsum(shift)
    index += np.arange(total)
    return source[index]


def _collapse_spaces(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each text without the spaces at its start or after a space, and without its
    trailing spaces and ``▁`` characters (sentencepiece's ``remove_extra_whitespaces``)."""
    if not data.size:
        return data, offsets
    space = data == 32
    # the drop mask padded to whole 8-byte words: counted as uint64 words below
    drop = np.zeros(-(-(data.size + 1) // 8) * 8, bool)
    drop[0] = True
    np.logical_and(space[1:], space[:-1], out=drop[1 : data.size])
    starts = offsets[:-1][offsets[:-1] < data.size]
    drop[starts] = True  # a space at a text's start (other starts: not a space, below)
    drop[: data.size] &= space
    # trailing spaces and ▁: walk back from each end while one is there
    ends = offsets[1:].copy()
    begins = offsets[:-1]
    active = np.flatnonzero(ends > begins)
    cut = []
    while active.size:
        end = ends[active]
        last = data[end - 1]
        is_space = last == 32
        is_symbol = (last == 0x81) & (end - begins[active] >= 3)
        if is_symbol.any():
            at = end[is_symbol]
            is_symbol[is_symbol] = (data[at - 2] == 0x96) & (data[at - 3] == 0xE2)
        step = np.where(is_space, 1, np.where(is_symbol, 3, 0))
        moving = step > 0
        active, end, step = active[moving], end[moving], step[moving]
        ends[active] = end - step
        cut.append(np.repeat(end - step, step) + _within(step))
        active = active[ends[active] > begins[active]]
    if cut:
        drop[np.concatenate(cut)] = True
    if not drop.any():  # nothing to collapse or strip: the texts as they are
        return data, offsets
    moved = offsets - _counts_before(drop, offsets)
    np.logical_not(drop[: data.size], out=space)
    return data[space], moved


_BYTE_SUM = np.uint64(0x0101010101010101)  # times a word of 0/1 bytes: their sum on top


def _counts_before(mask: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """int64 ``mask[:p].sum()`` for each p of ``positions`` (int64, each below
    ``mask.size``): ``mask`` bool, its size a multiple of 8; counted per 8-byte word
    (no index array of every set byte)."""
    words = mask.view(np.uint64)
    before_word = np.zeros(words.size + 1, np.uint64)
    np.multiply(words, _BYTE_SUM, out=before_word[1:])
    np.right_shift(before_word[1:], np.uint64(56), out=before_word[1:])
    np.cumsum(before_word, out=before_word)
    word = positions >> 3
    low = (np.uint64(1) << ((positions & 7) * 8).astype(np.uint64)) - np.uint64(1)
    partial = ((words[word] & low) * _BYTE_SUM) >> np.uint64(56)  # bytes of p's word before p
    return (before_word[word] + partial).astype(np.int64)


def _within(step: np.ndarray) -> np.ndarray:
    """0..step[k]-1 for every k, concatenated."""
    total = int(step.sum())
    return np.arange(total) - np.repeat(np.cumsum(step) - step, step)
