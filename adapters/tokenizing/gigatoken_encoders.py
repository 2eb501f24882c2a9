"""gigatoken (a Rust tokenizer, extra ``gigatoken``) as the encoder wherever it provably
gives the reference encoder's ids; the reference encoder everywhere else.

A :class:`GigaEncoder` is built only after a proof made when the tokenizer loads
(:func:`byte_level` for GPT-2 style byte-level BPE, :func:`sentencepiece` for
SentencePiece BPE with byte fallback); the builders return ``(encoder, "")`` or
``(None, why)``, and the tokenizer classes report which encoder runs and why.

Byte-level BPE (``GPT2BPETokenizer``, a plain GPT-2 style ``tokenizer.json``): gigatoken
splits added tokens out of the text first (as ``tokenizers`` does), pre-tokenizes with
GPT-2's expression, then merges the adjacent pair whose result has the lowest vocabulary
id, and emits a pre-token that is a vocabulary entry as that entry. It gives the ids of
pair merging (``tokenizers``, and tiktoken's rank merging,
``megadata_adapters.tokenizing.byte_level_bpe``)
when, besides the canonical merges that module proves (all bytes are tokens; each merge
joins earlier results; no two merges make one token; each result's characters merge to
it), the results' ids rise with the merge order (then "lowest id" is "first listed"), and
no other vocabulary entry can be a pre-token (it is not valid UTF-8, or GPT-2's
expression splits it when alone, hence in any text). The regular expressions' character
classes follow the Unicode tables each library was built with, and gigatoken's are newer:
texts holding a code point unassigned in Unicode 14.0 (``megadata_adapters.tokenizing.unicode_14``)
go to the
reference encoder; on every other code point the classes agree (``tests/adapters``
compares every code point). Such a text is cut before each newline that follows a
printable ASCII character other than a space (:data:`GPT2_CUTS`), and only its pieces
holding such a code point go to the reference: GPT-2's expression always ends a pre-token
there (no alternative matches both a non-space character and a newline; the alternatives
ending on that character stop before a newline whatever follows; the one lookahead,
``\\s+(?!\\S)``, looks only past whitespace) and starts the next one there, so the
pieces' pre-tokens are the whole text's; no added token holding a newline (checked)
means none crosses a cut.

SentencePiece BPE (``SentencePieceTokenizer``, ``GPTSentencePieceTokenizer``,
``Llama2Tokenizer``): ``megadata_adapters.tokenizing.gigatoken_sentencepiece`` (the same
proof over canonical merges; models that normalize go through
``megadata_adapters.tokenizing.sentencepiece_normalizer`` first, see ``GigaEncoder``).

tiktoken ranks files (our ``tiktoken`` type): tiktoken merges the adjacent pair whose
concatenation has the lowest rank. gigatoken reads the ranks as ids and derives one merge
per non-byte token; it merges the listed pair of lowest result id. Both emit a pre-token
that is a token whole. They agree when, for every token t of rank k, gigatoken's merge for
t is the last join of tiktoken's merging of t's bytes with the ranks below k (a run that
must end in two pieces), and the merges are listed by rising rank. Why: when tiktoken
joins (u, v) -> t, the pieces' edges around t are fixed, so the joins inside t so far are
exactly the run over t's bytes with the ranks below k, ending in [u, v]: the listed
merge. Conversely pair merging's lowest listed pair has rank k and tiktoken's lowest has
rank <= k, and one below k would be listed; ties take the leftmost in both. The split
into pre-tokens is gigatoken's hand-written scheme, not the ranks file's expression:
``TIKTOKEN_SCHEMES`` names the scheme measured to split as each expression (the tests
compare every code point in several contexts, with a vocabulary of every substring so
that equal ids mean equal splits); texts with code points unassigned in Unicode 14.0 go
to tiktoken, as for byte-level BPE.

Megatron's TikTokenizer (:func:`megatron_tiktoken`; ``--tiktoken-pattern v2``, whose
expression splits as the "nemotron" scheme, measured as above; ``v1`` splits as none):
the same proof on the ranks it uses (the first ``vocab_size - num_special_tokens``).
gigatoken reads ranks dense from 0 only, so it is given the ranks as they are and the
special tokens after them, and its ids are mapped to Megatron's (ranks + the number of
special tokens; special token k -> k). Megatron encodes with every special token allowed:
tiktoken cuts the text at each special-token string and encodes the pieces between them
alone, as gigatoken does with its special tokens. The cuts agree because each special
token is ``<`` + characters other than ``<`` and ``>`` + ``>`` (checked): two occurrences
can neither overlap nor nest, so every matcher finds the same ones. gigatoken must hold
each special token at its id, and the battery has special tokens beside each other, in
words and by spaces.

Every proof ends with gigatoken loading that ``tokenizer.json`` and handing back the same
vocabulary and merges, and with a battery of hard texts (every kind of character, spaces,
special-token text) encoded the same as by the reference.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import os
import re
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from megadata_adapters.tokenizing.byte_level_bpe import (
    bytes_to_unicode,
    is_byte_alphabet,
    token_bytes,
)
from megadata_adapters.tokenizing.unicode_14 import unassigned_14

__all__ = ["GigaEncoder", "available", "byte_level", "megatron_tiktoken", "tiktoken_ranks"]

MAX_INSTANCES = 4  # gigatoken instances one encoder loads for threads encoding at once


def instances_for_threads() -> int:
    """gigatoken instances an encoder loads: one per two usable cores (at most
    MAX_INSTANCES). A second instance costs a load holding the GIL and a cold cache of its
    own, while the JSON scan fills the time the calls on one wait: on 2 cores one serving
    both block threads beat two (docs/benchmarks.md)."""
    from megadata_core.cores import usable_threads

    return max(1, min(MAX_INSTANCES, (usable_threads() + 1) // 2))


LONG_TEXT = 512  # characters from which arrays find unproven code points faster than a regex
# where GPT-2's expression always cuts a text between pre-tokens (the module docstring)
GPT2_CUTS = re.compile(r"(?<=[!-~])\n")

# Texts every proof checks against the reference encoder before it is trusted.
BATTERY = [
    "", " ", "  ", "\t\n", "Hello, world. This is a test.", "  leading and trailing  ",
    "Zürich, São Paulo, Ångström, naïve café, résumé. ÀÉÎÕÜ àéîõü ß ﬁ",
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다.",
    "Привет, мир! Γειά σου κόσμε. مرحبا بالعالم हिन्दी ภาษาไทย",
    "control\x00chars\x01\x07\x1b[31m and\u200bzero width\ufeffbom \ufffd",
    "tabs\tand\nnewlines\r\nand\x0bvertical\x0cfeeds\x1f\x85nel\u2028ls\u3000",
    "many     spaces\n\n\nand blank lines", "emoji 😀🎉👩\u200d👩\u200d👧 ∑∫√ “curly” ‘single’ —",
    "numbers 1234567 3.14159 1,000,000 ١٢٣ ５６７", "don't can't I'm we'll they've she'd DON'T",
    "combining e\u0301 a\u0308 n\u0303; Hangul \u1100\u1161", "def f(x):\n    return x**2  # c\n",
    "special <|endoftext|> </s> <s> <unk> [SEP] <0x41> ▁ tokens in text", "▁▁ ▁x x▁",
    "\U0010fffd\ue000\U000f0000 private use", "a" * 300, "👍🏽" * 20 + " " * 40,
]


def available() -> str | None:
    """None when gigatoken imports, else why not."""
    try:
        import gigatoken  # noqa: F401
    except ImportError:
        return "gigatoken is not installed (pip install 'megadata-core[tokenizers]')"
    return None


def _arrays(result) -> tuple[np.ndarray, np.ndarray]:
    """(uint32 ids, int64 lengths) of gigatoken's jagged result, without copying the ids."""
    layout = result.layout
    if type(layout).__name__ == "ListOffsetArray":
        offsets = np.asarray(layout.offsets.data, np.int64)
        ids = np.asarray(layout.content.data)[offsets[0] : offsets[-1]]
        return ids, np.diff(offsets)
    import awkward as ak

    return np.asarray(ak.flatten(result)), np.asarray(ak.num(result, axis=1), np.int64)


@contextlib.contextmanager
def _memory_file(data: bytes) -> Iterator[str]:
    """A path whose file holds ``data``: an anonymous in-memory file on Linux."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("megadata-block", os.MFD_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as stream:
        stream.write(data)
        stream.flush()
        yield stream.name


def _character_class(ranges: np.ndarray) -> re.Pattern | None:
    """A pattern finding any code point of ``ranges`` (None for no ranges)."""
    if not len(ranges):
        return None
    parts = [f"{re.escape(chr(a))}-{re.escape(chr(b - 1))}" for a, b in ranges.tolist()
             if not 0xD800 <= a < 0xE000]
    return re.compile("[" + "".join(parts) + "]")


class GigaEncoder:
    """gigatoken's encoder (meets ``megadata_core.preprocess.encoding.BlockEncoder``).

    ``unproven``: code point ranges whose texts the owner sends to its reference encoder;
    ``proof``: what was proven (or, for Megatron's ``--use-gigatoken``, why not);
    ``loaded_from``: what gigatoken read, the tokenizer's ``file`` as written or a
    ``config`` built for it; ``source``: that ``tokenizer.json`` (text or dict) and
    ``backend`` the class gigatoken must load it as, for more instances (below);
    ``shift``: ``(ranks, specials)`` for Megatron's TikTokenizer, whose gigatoken ids are
    ranks 0..ranks-1 then its special tokens: its ids are those ranks + specials, and the
    special tokens 0..specials-1 (one add and one masked subtract per result).
    ``normalizer``: a ``sentencepiece_normalizer.Normalizer`` run on every text before
    gigatoken (a SentencePiece model that normalizes); the texts it leaves to the
    reference go to ``reference_batch(texts) -> (ids, lengths)``. Such an encoder takes
    JSON lines through Python's ``json`` (the texts must be normalized first).

    A batch or block is encoded on the calling thread (``parallel=False``): the pipeline's
    threads and processes are the parallelism (gigatoken's own pool, started per block,
    cost more than it gave on 2 cores). Threads encoding at once take an idle instance,
    or load another from ``source`` when all are busy (up to ``max_instances``,
    :func:`instances_for_threads`), or else share one: only gigatoken's batch and file
    encodings are called, which may run on one instance at once (its single-text
    ``encode`` may not: "Already borrowed").
    """

    def __init__(self, tokenizer, unproven: np.ndarray, proof: str,
                 loaded_from: str = "config", source: dict | str | None = None,
                 backend: str = "", shift: tuple[int, int] | None = None,
                 normalizer=None, reference_batch=None, cuts: re.Pattern | None = None) -> None:
        import awkward  # noqa: F401 - gigatoken's results; imported once, before workers fork

        self._tokenizer = tokenizer
        self.unproven = unproven
        self.proof = proof
        self.loaded_from = loaded_from
        self._source, self._backend = source, backend
        self.shift = shift
        self.normalizer, self._reference_batch = normalizer, reference_batch
        self.cuts = cuts
        self._finder = _character_class(unproven)
        self._idle = [tokenizer]
        self._instances = 1
        self.max_instances = instances_for_threads()
        self._lock = threading.Lock()

    def with_unproven(self, unproven: np.ndarray) -> GigaEncoder:
        """This encoder (the same gigatoken) sending the texts of ``unproven`` elsewhere."""
        return GigaEncoder(self._tokenizer, unproven, self.proof, self.loaded_from,
                           self._source, self._backend, self.shift, self.normalizer,
                           self._reference_batch, self.cuts)

    @contextlib.contextmanager
    def _instance(self) -> Iterator:
        """A gigatoken instance for this thread's call (see the class docstring)."""
        with self._lock:
            mine = self._idle.pop() if self._idle else None
            grow = mine is None and self._source is not None and (
                self._instances < self.max_instances)
            self._instances += grow
        if grow:
            if not isinstance(self._source, str):  # serialized once, for every later load
                self._source = json.dumps(self._source, ensure_ascii=False)
            mine, _ = load_config(self._source, self._backend)  # the bytes proven: the same ids
            if mine is None:  # (it loaded before: not expected) share the first one
                with self._lock:
                    self._instances -= 1
        if mine is None:
            yield self._tokenizer  # shared (batch and file encodings only)
            return
        try:
            yield mine
        finally:
            with self._lock:
                self._idle.append(mine)

    @property
    def reads_json_natively(self) -> bool:
        """False for an encoder with a normalizer: its JSON lines are read by Python's
        ``json`` (preprocessing's exact path), then normalized, then encoded."""
        return self.normalizer is None

    def needs_reference(self, text: str) -> bool:
        """Whether ``text`` holds a character whose ids are not proven equal."""
        if self._finder is None or text.isascii():
            return False
        if len(text) < LONG_TEXT:
            return bool(self._finder.search(text))
        return bool(self._held(text).size)

    def _held(self, text: str) -> np.ndarray:
        """Where ``text`` holds a code point of ``unproven`` (int64 character offsets)."""
        points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
        slot = np.searchsorted(self.unproven[:, 0], points, side="right") - 1
        return np.flatnonzero((slot >= 0) & (points < self.unproven[np.maximum(slot, 0), 1]))

    def pieces(self, text: str) -> tuple[list[str], np.ndarray]:
        """``text`` cut where ``cuts`` matches (no cut changes the ids: see the module
        docstring), and which pieces hold a code point of ``unproven`` (bool)."""
        starts = [0]
        if self.cuts is not None:
            starts.extend(found.start() for found in self.cuts.finditer(text))
        pieces = [text[start:stop] for start, stop in zip(starts, [*starts[1:], len(text)])]
        holds = np.zeros(len(pieces), bool)
        holds[np.searchsorted(np.asarray(starts), self._held(text), side="right") - 1] = True
        return pieces, holds

    def _ids(self, found: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """gigatoken's (ids, lengths) as this tokenizer's ids (``shift``)."""
        if self.shift is None:
            return found
        ranks, specials = self.shift
        ids = found[0] + np.asarray(specials, found[0].dtype)  # a new array: ranks shifted
        np.subtract(ids, ranks + specials, out=ids, where=ids >= ranks + specials)
        return ids, found[1]

    def encode(self, text: str) -> np.ndarray:
        if self.normalizer is not None:
            return self.encode_batch([text])[0].astype(np.int64)
        with self._instance() as tokenizer:  # a batch of one: an instance may be shared
            found = _arrays(tokenizer.encode_batch([text], parallel=False))
        return np.asarray(self._ids(found)[0], np.int64)

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(uint32 ids of all texts concatenated, int64 lengths)."""
        if self.normalizer is not None:
            encoded = [text.encode("utf-8") for text in texts]
            offsets = np.zeros(len(encoded) + 1, np.int64)
            np.cumsum([len(raw) for raw in encoded], out=offsets[1:])
            return self._normalized_utf8(b"".join(encoded), offsets)
        with self._instance() as tokenizer:
            return self._ids(_arrays(tokenizer.encode_batch(list(texts), parallel=False)))

    def encode_jsonl(self, block: bytes, key: str) -> tuple[np.ndarray, np.ndarray]:
        if self.normalizer is not None:
            return self.encode_batch(_jsonl_texts(block, key))
        import gigatoken

        with _memory_file(block) as path, self._instance() as tokenizer:
            source = gigatoken.JsonlFileSource([path], key)
            return self._ids(_arrays(tokenizer.encode_files(source, parallel=False)))

    def encode_utf8(self, data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.normalizer is None:
            return self._encode_utf8(data, offsets)
        return self._normalized_utf8(np.asarray(data, np.uint8), np.asarray(offsets, np.int64))

    def _normalized_utf8(self, data: np.ndarray | bytes, offsets: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
        """``encode_utf8`` through the normalizer: the rows it leaves to the reference
        encoded by ``reference_batch``."""
        normalized, normalized_offsets, reference = self.normalizer.normalize(data, offsets)
        ids, lengths = self._encode_utf8(normalized, normalized_offsets)
        if not reference.any():
            return ids, lengths
        rows = np.flatnonzero(reference)
        raw = data if isinstance(data, bytes) else data.tobytes()
        theirs = self._reference_batch([raw[offsets[i] : offsets[i + 1]].decode("utf-8")
                                        for i in rows.tolist()])
        return replace_rows((ids, lengths), rows, theirs)

    def _encode_utf8(self, data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        import awkward as ak

        strings = ak.contents.ListOffsetArray(
            ak.index.Index64(np.asarray(offsets, np.int64)),
            ak.contents.NumpyArray(np.asarray(data, np.uint8), parameters={"__array__": "char"}),
            parameters={"__array__": "string"},
        )
        with self._instance() as tokenizer:
            return self._ids(_arrays(tokenizer.encode_batch(ak.Array(strings), parallel=False)))


def _jsonl_texts(block: bytes, key: str) -> list[str]:
    """``key``'s text on each non-empty line of ``block``, up to the first line that is not
    a JSON object holding it as a string of valid Unicode (a native reader stops there)."""
    texts = []
    for line in block.split(b"\n"):
        if not line:
            continue
        try:
            text = json.loads(line)[key]
            if not isinstance(text, str) or not text.isascii() and (
                    text.encode("utf-8", "surrogatepass") != text.encode("utf-8", "ignore")):
                break
        except (ValueError, KeyError, TypeError):
            break
        texts.append(text)
    return texts


def replace_rows(found: tuple[np.ndarray, np.ndarray], rows: np.ndarray,
                 theirs: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``found`` (ids, lengths of every text) with the texts at ``rows`` (sorted) replaced
    by ``theirs`` (their ids, lengths): one gather."""
    ids, lengths = np.asarray(found[0], np.int64), np.asarray(found[1], np.int64)
    their_ids, their_lengths = np.asarray(theirs[0], np.int64), np.asarray(theirs[1], np.int64)
    starts = np.cumsum(lengths) - lengths
    source = np.concatenate([ids, their_ids])
    new_lengths = lengths.copy()
    new_lengths[rows] = their_lengths
    new_starts = starts.copy()
    new_starts[rows] = ids.size + np.cumsum(their_lengths) - their_lengths
    out_starts = np.cumsum(new_lengths) - new_lengths
    index = np.repeat(new_starts - out_starts, new_lengths) + np.arange(int(new_lengths.sum()))
    return source[index], new_lengths


def load_config(config: dict | str, backend: str):
    """gigatoken's tokenizer for a ``tokenizer.json`` (a dict, or its text as written), or
    (None, why)."""
    import gigatoken

    if backend.startswith("tiktoken:"):
        return _load_ranks(config, backend)
    if backend.startswith("megatron-tiktoken:"):
        return _load_megatron_ranks(config, backend)
    text = config if isinstance(config, str) else json.dumps(config, ensure_ascii=False)
    try:
        tokenizer = gigatoken.Tokenizer.from_json(text)
    except Exception as error:  # gigatoken raises its own exception types
        return None, f"gigatoken cannot load it ({error})"
    if type(tokenizer.backend).__name__ != backend:
        return None, f"gigatoken loaded it as {type(tokenizer.backend).__name__}, not {backend}"
    return tokenizer, ""


def battery(tokenizer, reference, extra: Sequence[str] = ()) -> str:
    """'' when gigatoken and ``reference(text) -> ids`` agree on every battery text."""
    for text in [*BATTERY, *extra]:
        mine = np.asarray(tokenizer.encode(text), np.int64)
        theirs = np.asarray(reference(text), np.int64).reshape(-1)
        if mine.shape != theirs.shape or not (mine == theirs).all():
            return f"gigatoken and the reference differ on {text[:40]!r}"
    return ""


# -- byte-level BPE ------------------------------------------------------------------------


def byte_level(
    vocab: Mapping[str, int],
    merges: Sequence[tuple[str, str]],
    added: Mapping[str, int],
    reference,
    *,
    proven: str = "",
    written: str | None = None,
) -> tuple[GigaEncoder | None, str]:
    """gigatoken for a GPT-2 style byte-level BPE whose merges
    ``megadata_adapters.tokenizing.byte_level_bpe``
    proved canonical (see the module docstring); ``reference(text) -> ids`` is the
    encoder it must equal. ``vocab``: token (GPT-2's byte alphabet) -> id; ``added``:
    added tokens split out of the text (content -> id). ``written``: the
    ``tokenizer.json`` as written, tried first (gigatoken reads it faster than a
    ``tokenizer.json`` rebuilt from ``vocab`` and ``merges``, which is tried next); the
    encoder's ``loaded_from`` says which passed ("file" or "config"). ``proven``: that
    ``loaded_from`` of a proof that passed before for the same file and library versions
    (``megadata_adapters.tokenizing.proof_cache``): gigatoken is loaded so, its checks skipped."""
    why = available()
    if why:
        return None, why
    sources = {"file": lambda: written, "config": lambda: _byte_level_config(vocab, merges, added)}
    if written is None:
        del sources["file"]
    if proven:
        if proven not in sources:
            return None, f"the proof passed for a tokenizer loaded from its {proven}"
        source = sources[proven]()
        tokenizer, why = load_config(source, "BPETokenizer")
        if tokenizer is None:
            return None, why
        return GigaEncoder(tokenizer, unassigned_14(), BYTE_LEVEL_PROOF, proven, source,
                           "BPETokenizer", cuts=_gpt2_cuts(added)), ""
    results = [left + right for left, right in merges]
    ids = np.fromiter((vocab[token] for token in results), np.int64, len(results))
    if ids.size and (np.diff(ids) <= 0).any():
        k = int(np.flatnonzero(np.diff(ids) <= 0)[0]) + 1
        return None, f"merge {k + 1} makes id {ids[k]}, not above the previous merge's"
    made = set(results) | set(bytes_to_unicode().values())
    for token in set(vocab) - made - set(added):
        raw = token_bytes(token) if is_byte_alphabet(token) else None
        if raw is not None and _whole_pretoken(raw):
            return None, f"vocabulary entry {token!r} is no merge's result but can be a pre-token"
    for loaded_from, make in sources.items():  # the file as written, else one rebuilt
        source = make()
        tokenizer, why = load_config(source, "BPETokenizer")
        if tokenizer is None:
            continue
        if not _same_model(tokenizer, vocab, merges):
            why = "gigatoken read another vocabulary or other merges"
            continue
        why = battery(tokenizer, reference, extra=list(added))
        if not why:
            return GigaEncoder(tokenizer, unassigned_14(), BYTE_LEVEL_PROOF, loaded_from,
                               source, "BPETokenizer", cuts=_gpt2_cuts(added)), ""
    return None, why


def _gpt2_cuts(added: Mapping[str, int]) -> re.Pattern | None:
    """:data:`GPT2_CUTS`, unless an added token holds a newline (it could cross a cut)."""
    return None if any("\n" in token for token in added) else GPT2_CUTS


BYTE_LEVEL_PROOF = "canonical byte-level BPE merges: same ids as pair merging"


def _byte_level_config(vocab: Mapping[str, int], merges, added: Mapping[str, int]) -> dict:
    """The ``tokenizer.json`` dict gigatoken is given for a byte-level BPE."""
    return {
        "version": "1.0",
        "added_tokens": [{"id": int(i), "content": c, "special": True} for c, i in added.items()],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
        "model": {"type": "BPE", "byte_fallback": False, "vocab": dict(vocab),
                  "merges": list(merges)},  # pairs: JSON arrays
    }


def _same_model(tokenizer, vocab: Mapping[str, int], merges) -> bool:
    """Whether gigatoken holds ``vocab`` (as bytes, by id) and ``merges`` (as byte pairs,
    in order): compared as two joined strings and their lengths each, no Python loop."""
    got = tokenizer.vocab
    ids = sorted(i for t, i in vocab.items() if is_byte_alphabet(t))
    by_id = {i: t for t, i in vocab.items()}
    mine = [by_id[i] for i in ids]
    theirs = [got.get(i, b"") for i in ids]
    if token_bytes("".join(mine)) != b"".join(theirs):
        return False
    if list(map(len, mine)) != list(map(len, theirs)):
        return False
    pairs = tokenizer.merges
    if len(pairs) != len(merges):
        return False
    left = "".join(a for a, _ in merges)
    right = "".join(b for _, b in merges)
    return (token_bytes(left) == b"".join(a for a, _ in pairs)
            and token_bytes(right) == b"".join(b for _, b in pairs)
            and [len(a) for a, _ in merges] == [len(a) for a, _ in pairs]
            and [len(b) for _, b in merges] == [len(b) for _, b in pairs])


@functools.cache
def _gpt2_pretokenizer():
    from tokenizers import pre_tokenizers

    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _whole_pretoken(raw: bytes) -> bool:
    """Whether GPT-2's expression could match ``raw`` as one pre-token: never when it is
    not valid UTF-8; else when it matches it whole when alone (a match ending at a text's
    end is no shorter than the same match inside a text, so a string split alone is split
    everywhere)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return len(_gpt2_pretokenizer().pre_tokenize_str(text)) == 1


# -- using an encoder ----------------------------------------------------------------------

ENCODERS = ("auto", "gigatoken", "reference")


def check_mode(encoder: str) -> str:
    """``encoder`` when it is one of ENCODERS (else a DataError naming the choices)."""
    from megadata_core.errors import DataError

    if encoder not in ENCODERS:
        raise DataError(f"encoder: {encoder!r} is not one of {', '.join(ENCODERS)}")
    return encoder


def choose(found: tuple[GigaEncoder | None, str], mode: str, reference: str, unchecked=None):
    """(encoder or None, the log line) for a proof's result under ``mode``: ``auto`` takes a
    proven encoder, ``reference`` none, ``gigatoken`` (Megatron's ``--use-gigatoken``) a
    proven one or else ``unchecked()`` (gigatoken's own ids, as Megatron gets them; a
    DataError when gigatoken cannot load the tokenizer at all)."""
    from megadata_core.errors import DataError

    giga, why = found
    if mode == "reference":
        return None, f"{reference} (--encoder reference)"
    if giga is not None and mode == "gigatoken" and len(giga.unproven):
        return giga.with_unproven(np.zeros((0, 2), np.int64)), (
            f"gigatoken ({giga.proof}; every text, as Megatron's --use-gigatoken: texts with "
            f"characters unassigned in Unicode 14.0 may get other ids than {reference}'s)")
    if giga is not None:
        return giga, f"gigatoken ({giga.proof}; {_unproven_note(giga, reference)})"
    if mode == "gigatoken":
        if unchecked is None or available():
            raise DataError(f"--use-gigatoken: gigatoken cannot run this tokenizer ({why})")
        return unchecked(why), (
            f"gigatoken, as Megatron's --use-gigatoken runs it; its ids are NOT proven equal "
            f"to {reference}'s: {why}")
    return None, f"{reference} (not gigatoken: {why})"


def _unproven_note(giga: GigaEncoder, reference: str) -> str:
    if not len(giga.unproven):
        return "every text"
    return f"texts with characters unassigned in Unicode 14.0 go to {reference}"


def unchecked_byte_level(config: Mapping, why: str) -> GigaEncoder:
    """gigatoken on a ``tokenizer.json`` as it is, nothing proven (Megatron's fast path)."""
    tokenizer, error = load_config(dict(config), "BPETokenizer")
    if tokenizer is None:
        from megadata_core.errors import DataError

        raise DataError(f"--use-gigatoken: {error}")
    return GigaEncoder(tokenizer, np.zeros((0, 2), np.int64), f"not proven: {why}", "config",
                       dict(config), "BPETokenizer")


def batch(
    giga: GigaEncoder, texts: Sequence[str], reference_batch
) -> tuple[np.ndarray, np.ndarray]:
    """(int64 ids, int64 lengths) of ``texts``: gigatoken's, but for the texts it must leave
    to ``reference_batch(texts) -> (ids, lengths)`` (with ``cuts``: only their pieces
    holding a code point it is not proven on)."""
    texts = list(texts)
    others = [i for i, text in enumerate(texts) if giga.needs_reference(text)]
    if not others:
        ids, lengths = giga.encode_batch(texts)
        return ids.astype(np.int64), lengths
    if giga.cuts is not None:
        return _in_pieces(giga, texts, others, reference_batch)
    theirs = np.zeros(len(texts), bool)
    theirs[others] = True
    return _split(giga, texts, theirs, reference_batch)


def _split(giga: GigaEncoder, texts: list[str], theirs: np.ndarray, reference_batch
           ) -> tuple[np.ndarray, np.ndarray]:
    """(int64 ids, int64 lengths) of ``texts``: those at ``theirs`` (bool) by
    ``reference_batch``, the others by gigatoken."""
    mine = np.flatnonzero(~theirs)
    others = np.flatnonzero(theirs)
    first = giga.encode_batch([texts[i] for i in mine.tolist()])
    second = reference_batch([texts[i] for i in others.tolist()])
    order = np.argsort(np.concatenate([mine, others]), kind="stable")
    ids = np.concatenate([np.asarray(first[0], np.int64), np.asarray(second[0], np.int64)])
    lengths = np.concatenate([np.asarray(first[1], np.int64), np.asarray(second[1], np.int64)])
    starts = (np.cumsum(lengths) - lengths)[order]
    lengths = lengths[order]
    index = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(lengths.sum())
    return ids[index], lengths


def _in_pieces(giga: GigaEncoder, texts: list[str], others: list[int], reference_batch
               ) -> tuple[np.ndarray, np.ndarray]:
    """``batch`` with each text of ``others`` cut into ``giga.pieces``: (ids, lengths) of
    ``texts``, each the concatenation of its pieces'."""
    parts: list[str] = []
    theirs: list[np.ndarray] = []
    counts = np.ones(len(texts), np.int64)
    start = 0
    for index in others:  # (few: texts holding an unproven code point)
        parts.extend(texts[start:index])
        theirs.append(np.zeros(index - start, bool))
        pieces, holds = giga.pieces(texts[index])
        parts.extend(pieces)
        theirs.append(holds)
        counts[index] = len(pieces)
        start = index + 1
    parts.extend(texts[start:])
    theirs.append(np.zeros(len(texts) - start, bool))
    ids, lengths = _split(giga, parts, np.concatenate(theirs), reference_batch)
    return ids, np.add.reduceat(lengths, np.cumsum(counts) - counts)


# -- tiktoken ranks files --------------------------------------------------------------------

# gigatoken's pre-tokenizer scheme that splits text as each expression does, measured
# (tests/adapters/tokenizing/test_gigatoken_tiktoken.py): cl100k_base's expression (our tiktoken
# type's default) splits as "olmo3" (not "gpt4", which differs on spaces after a newline at
# a text's end, e.g. "a\n "). Megatron's TikTokenizer "v2" splits as "nemotron"
# (``megatron_tiktoken``); "v1" as no scheme.
CL100K_SCHEME = "olmo3"
MEGATRON_SCHEMES = {"v2": "nemotron"}

TIKTOKEN_PROOF = "tiktoken rank merging equals gigatoken's merges; the pre-tokenizer splits alike"


def _load_ranks(source: str, backend: str):
    """gigatoken for ``source`` (JSON [path, sha256 of the bytes proven]) with the scheme
    ``backend`` names ("tiktoken:SCHEME"), or (None, why); a changed file is refused."""
    path, digest = json.loads(source)
    try:
        with open(path, "rb") as stream:
            raw = stream.read()
    except OSError as error:
        return None, f"gigatoken cannot load {path} ({error})"
    if hashlib.sha256(raw).hexdigest() != digest:
        return None, f"{path} changed since its proof"
    # the bytes hashed, not the file read again
    return _from_tiktoken(raw, backend.removeprefix("tiktoken:"), {}, path)


def _from_tiktoken(raw: bytes, scheme: str, specials: Mapping[str, int], what: str):
    """gigatoken's tokenizer for a tiktoken ranks file's bytes ``raw``, pre-tokenized by
    ``scheme``, with ``specials`` ({content: id}); or (None, why) naming ``what``."""
    import gigatoken

    try:
        with _memory_file(raw) as name:
            tokenizer = gigatoken.Tokenizer.from_tiktoken(
                name, pretokenizer=scheme, **({"special_tokens": dict(specials)}
                                              if specials else {}))
    except BaseException as error:  # gigatoken's own types, and Rust panics (BaseException)
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        return None, f"gigatoken cannot load {what} ({error})"
    return tokenizer, ""


def _rank_run(piece: bytes, ranks: Mapping[bytes, int], below: int) -> list[bytes]:
    """tiktoken's merging of ``piece``'s bytes with the ranks below ``below`` only."""
    parts = [piece[i : i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best, where = below, -1
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1], below)
            if rank < best:
                best, where = rank, i
        if where < 0:
            break
        parts[where : where + 2] = [parts[where] + parts[where + 1]]
    return parts


def _tiktoken_merges(ranks: Mapping[bytes, int]) -> tuple[list[tuple[bytes, bytes]] | None, str]:
    """The merge tiktoken's merging makes each non-byte token with (rank order), or why none."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) == 1:
            continue
        parts = _rank_run(token, ranks, rank)
        if len(parts) != 2:
            return None, (f"token {token!r} (rank {rank}) is not the join of two tokens of "
                          "lower rank")
        merges.append((parts[0], parts[1]))
    return merges, ""


def tiktoken_ranks(path: str, ranks: Mapping[bytes, int], scheme: str, reference, *,
                   proven: bool = False) -> tuple[GigaEncoder | None, str]:
    """gigatoken for the tiktoken ranks file ``path`` (``ranks``: token bytes -> rank, dense
    and with all 256 bytes, as ``TiktokenTokenizer`` checks) pre-tokenized with gigatoken's
    ``scheme``, which the caller has measured to split as the file's expression (see the
    module docstring); ``reference(text) -> ids`` is tiktoken. ``proven``: a proof passed
    before for the same bytes and library versions
    (``megadata_adapters.tokenizing.proof_cache``)."""
    why = available()
    if why:
        return None, why
    merges, why = (None, "") if proven else _tiktoken_merges(ranks)
    if why:  # (before gigatoken loads it: it may panic on such a file)
        return None, why
    with open(path, "rb") as stream:
        digest = hashlib.sha256(stream.read()).hexdigest()
    source, backend = json.dumps([path, digest]), f"tiktoken:{scheme}"
    tokenizer, why = _load_ranks(source, backend)
    if tokenizer is None:
        return None, why
    encoder = GigaEncoder(tokenizer, unassigned_14(), TIKTOKEN_PROOF, "file", source, backend)
    if proven:
        return encoder, ""
    vocab = tokenizer.vocab
    if len(vocab) != len(ranks) or any(vocab.get(rank) != token for token, rank in ranks.items()):
        return None, "gigatoken read other ranks from the file"
    if [tuple(merge) for merge in tokenizer.merges] != merges:
        return None, "gigatoken's merges are not tiktoken's joins in rank order"
    why = battery(tokenizer, reference)
    return (None, why) if why else (encoder, "")


# -- Megatron's TikTokenizer -----------------------------------------------------------------

MEGATRON_TIKTOKEN_PROOF = ("tiktoken rank merging equals gigatoken's merges; the pre-tokenizer "
                           "splits alike; special tokens split out alike")


_SPECIAL = re.compile(r"<[^<>]*>")  # occurrences of such tokens never overlap


def _load_megatron_ranks(source: str, backend: str):
    """gigatoken for ``source`` (JSON [a tiktoken ranks file's text, {special: id}]) with
    the scheme ``backend`` names ("megatron-tiktoken:SCHEME"), or (None, why)."""
    text, specials = json.loads(source)
    return _from_tiktoken(text.encode("ascii"), backend.removeprefix("megatron-tiktoken:"),
                          specials, "the ranks")


def megatron_tiktoken(tokens: Sequence[bytes], specials: Sequence[str], scheme: str,
                      reference, *, proven: bool = False) -> tuple[GigaEncoder | None, str]:
    """gigatoken for Megatron's TikTokenizer: ``tokens`` the BPE tokens by rank (the ranks
    it uses, after ``vocab_size``'s cut), ``specials`` its special tokens (id = index;
    rank r's id is r + len(specials)); ``scheme`` gigatoken's pre-tokenizer measured to
    split as its expression; ``reference(text) -> ids`` is tiktoken with every special
    token allowed. ``proven``: a proof passed before for the same file, options and
    library versions (``megadata_adapters.tokenizing.proof_cache``).

    gigatoken reads ranks dense from 0 only, so it is given the ranks as they are and the
    special tokens after them (ids len(tokens)..): the encoder's ``shift`` maps its ids to
    Megatron's. The proof is ``tiktoken_ranks``'s on the ranks used, plus: gigatoken holds
    every special token at its id, and the battery (with texts of special tokens beside
    each other, text and spaces) gives tiktoken's ids after the shift."""
    why = available()
    if why:
        return None, why
    odd = next((token for token in specials if not _SPECIAL.fullmatch(token)), None)
    if odd is not None:
        return None, f"special token {odd!r} is not '<', characters other than '<>', '>'"
    ranks = {token: rank for rank, token in enumerate(tokens)}
    if len(ranks) != len(tokens) or any(ranks.get(bytes([b])) != b for b in range(256)):
        return None, "the ranks used are not the 256 bytes first, then distinct tokens"
    merges, why = (None, "") if proven else _tiktoken_merges(ranks)
    if why:  # (before gigatoken loads it: it may panic on such a file)
        return None, why
    text = "".join(f"{base64.b64encode(t).decode()} {r}\n" for r, t in enumerate(tokens))
    special_ids = {token: len(tokens) + k for k, token in enumerate(specials)}
    source = json.dumps([text, special_ids])
    backend = f"megatron-tiktoken:{scheme}"
    tokenizer, why = _load_megatron_ranks(source, backend)
    if tokenizer is None:
        return None, why
    encoder = GigaEncoder(tokenizer, unassigned_14(), MEGATRON_TIKTOKEN_PROOF, "config",
                          source, backend, shift=(len(tokens), len(specials)))
    if proven:
        return encoder, ""
    vocab = tokenizer.vocab
    if len(vocab) != len(tokens) + len(specials) or any(
            vocab.get(rank) != token for rank, token in enumerate(tokens)):
        return None, "gigatoken read other ranks"
    if any(vocab.get(i) != token.encode() for token, i in special_ids.items()):
        return None, "gigatoken holds other special tokens"  # (the battery: split out alike)
    if [tuple(merge) for merge in tokenizer.merges] != merges:
        return None, "gigatoken's merges are not tiktoken's joins in rank order"
    why = battery(encoder, reference, extra=_special_texts(specials))
    return (None, why) if why else (encoder, "")


def _special_texts(specials: Sequence[str]) -> list[str]:
    """Texts of special tokens alone, beside each other, inside words and spaces, cut."""
    first, last = specials[:8], specials[-3:]
    return [*first, *last, "".join(first), " ".join(last) + " ", f"a{last[-1]}b  {first[0]}\n",
            f"{first[-1][:-1]} {first[1]}{first[1][1:]} <{first[2]}> \n {last[0]}  x"]
