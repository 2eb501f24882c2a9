"""GPT-2 byte-level BPE encoded by tiktoken, used only where its rank merging is exact.

GPT-2's BPE (Megatron's GPT2BPETokenizer, the ``tokenizers`` BPE model) merges the
adjacent pair listed first in ``merges.txt``; tiktoken merges the adjacent pair whose
concatenation has the lowest rank, and emits a pre-token that is a token as a whole.
With bytes ranked 0..255 and the result of merge k ranked 256 + k, both give the
same tokens for every input when the merges are *canonical*:

1. all 256 byte symbols are tokens;
2. each merge joins bytes or results of earlier merges, and no two merges (and no
   byte) make the same token;
3. pair merging encodes the characters of each merge result to that one token.

Why: by 2, pair merging's ranks never decrease along a run. Suppose both agreed so
far and tiktoken's lowest pair is (u, v) -> t, made by merge k from (x, y). The
merges that built u and v all ranked below k and stayed inside t, so merging t's
characters with the merges before k gives [u, v]; by 3 (and 2, which makes merge
k the last one of that run) it gives [x, y]. So tiktoken only joins listed pairs,
the lowest first and the leftmost of equals, as pair merging does; and by 3 a
pre-token that is a token is encoded whole by both. A trained BPE is canonical:
each token was made from the two pieces the earlier merges left in some word.

``rank_encoder`` checks 1-3 (3 with the ``tokenizers`` BPE model, in one batch
call) and returns a ``RankEncoder``, or None with the reason. tiktoken ids are the
ranks; a lookup array maps them to the vocabulary's ids.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["GPT2_PATTERN", "RankEncoder", "bytes_to_unicode", "rank_encoder",
           "tokenizer_json_encoder"]

# GPT-2's pre-tokenizer (the ``tokenizers`` ByteLevel regex, tiktoken's r50k_base).
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


@functools.cache
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the alphabet of a byte-level vocab)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@functools.cache
def _to_latin1() -> dict[int, int]:
    return {ord(char): byte for byte, char in bytes_to_unicode().items()}


def token_bytes(token: str) -> bytes:
    """The bytes a token of GPT-2's byte alphabet stands for (one C-level translate)."""
    return token.translate(_to_latin1()).encode("latin-1")


@functools.cache
def _alphabet_removed() -> dict[int, None]:
    return dict.fromkeys(_to_latin1())


def is_byte_alphabet(token: str) -> bool:
    """Whether every character of ``token`` is in GPT-2's byte alphabet."""
    return not token.translate(_alphabet_removed())


class RankEncoder:
    """tiktoken's encoder over canonical merges; ids mapped back to the vocabulary's.

    ``specials``: added tokens split out of the text first (as ``tokenizers`` does).
    """

    name = "tiktoken"

    def __init__(
        self, vocab: Mapping[str, int], merges: Sequence[tuple[str, str]],
        added: Mapping[str, int], *, written: Sequence | None = None,
    ) -> None:
        """``written``: the merges as a ``tokenizer.json`` writes them ("a b" or [a, b]),
        made pairs on first use, in place of ``merges``."""
        self.vocab, self.added = vocab, dict(added)
        self._merges, self._written = list(merges), written

    @functools.cached_property
    def merges(self) -> list[tuple[str, str]]:
        """The merges in priority order (a loaded verdict's: made pairs when first used)."""
        return self._merges if self._written is None else _pairs(self._written)

    @functools.cached_property
    def _encode(self):
        """tiktoken's encode over the ranks (built on first use: loading stays cheap when
        another encoder does the work)."""
        import tiktoken

        table = bytes_to_unicode()
        ranks = {char: byte for byte, char in table.items()}
        for k, (left, right) in enumerate(self.merges):
            ranks[left + right] = 256 + k
        lookup = np.empty(len(ranks) + len(self.added), dtype=np.int64)
        for token, rank in ranks.items():
            lookup[rank] = self.vocab[token]
        specials = {}
        for i, (content, token_id) in enumerate(sorted(self.added.items())):
            specials[content] = len(ranks) + i
            lookup[len(ranks) + i] = token_id
        self._lookup = lookup
        encoding = tiktoken.Encoding(
            name=f"canonical-bpe-{len(self.merges)}", pat_str=GPT2_PATTERN,
            mergeable_ranks={token_bytes(token): rank for token, rank in ranks.items()},
            special_tokens=specials,
        )
        if specials:
            return functools.partial(encoding.encode, allowed_special="all",
                                     disallowed_special=())
        return encoding.encode_ordinary

    def encode(self, text: str) -> np.ndarray:
        """int64[n] vocabulary ids of ``text``."""
        ranks = np.asarray(self._encode(text), dtype=np.int64)
        return self._lookup[ranks]

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(int64 ids of all texts concatenated, int64[len(texts)] lengths)."""
        encode = self._encode
        lists = list(map(encode, texts))
        lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        ranks = np.fromiter(
            itertools.chain.from_iterable(lists), dtype=np.int64, count=int(lengths.sum())
        )
        return self._lookup[ranks], lengths


def rank_encoder(
    vocab: Mapping[str, int],
    merges: Sequence[tuple[str, str]],
    added: Mapping[str, int] | None = None,
    *,
    proven: bool = False,
) -> tuple[RankEncoder | None, str]:
    """(RankEncoder, "") when the merges are canonical (see the module), else (None, why).
    ``proven``: these checks passed before for the same tokenizer file and library
    versions (a verdict kept by ``megadata_adapters.tokenizing.proof_cache``): they are skipped.

    ``vocab``: token string (GPT-2's byte alphabet) -> id; ``merges``: pairs in
    priority order; ``added``: added tokens split out of the text before BPE (content
    -> id), none of which may overlap another in any text.
    """
    if proven:  # the same file passed every check below before
        return RankEncoder(vocab, merges, added or {}), ""
    table = bytes_to_unicode()
    missing = [byte for byte, char in table.items() if char not in vocab]
    if missing:
        return None, f"byte {missing[0]} has no token"
    made = {char: byte for byte, char in table.items()}  # token -> rank
    results = []
    for k, (left, right) in enumerate(merges):
        token = left + right
        if left not in made or right not in made:
            return None, f"merge {k + 1} ({left} {right}) joins a token no earlier merge made"
        if token in made:
            return None, f"merge {k + 1} ({left} {right}) makes {token!r} again"
        if token not in vocab:
            return None, f"merge {k + 1} makes {token!r}, which is not in the vocabulary"
        made[token] = 256 + k
        results.append(token)
    if not _self_consistent(vocab, merges, results):
        return None, "some merge result is not encoded to itself by its own merges"
    overlap = _overlapping(added or {})
    if overlap:
        return None, f"added tokens {overlap[0]!r} and {overlap[1]!r} can overlap in a text"
    return RankEncoder(vocab, merges, added or {}), ""


def _self_consistent(vocab, merges, results: list[str]) -> bool:
    """Condition 3: pair merging (the ``tokenizers`` BPE model) encodes each result whole."""
    if not results:
        return True
    from tokenizers import Tokenizer, models

    model = models.BPE(vocab=dict(vocab), merges=[tuple(pair) for pair in merges],
                       ignore_merges=False)
    encodings = Tokenizer(model).encode_batch_fast(results, add_special_tokens=False)
    expected = np.fromiter((vocab[token] for token in results), np.int64, len(results))
    lengths = np.fromiter((len(e.ids) for e in encodings), np.int64, len(results))
    if not (lengths == 1).all():
        return False
    found = np.fromiter((e.ids[0] for e in encodings), np.int64, len(results))
    return bool((found == expected).all())


def _overlapping(added: Mapping[str, int]) -> tuple[str, str] | None:
    """Two added tokens whose matches could overlap (one inside the other, or one's end
    the other's start), or None: then any order of matching finds the same tokens."""
    contents = sorted(added)
    for first, second in itertools.permutations(contents, 2):
        if second in first:
            return first, second
        if any(first.endswith(second[:n]) for n in range(1, min(len(first), len(second)))):
            return first, second
    return None


def _pairs(merges: Sequence) -> list[tuple[str, ...]]:
    """A ``tokenizer.json``'s merges ("a b" strings or [a, b] lists) as tuples."""
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]


def tokenizer_json_encoder(
    config: Mapping, *, proven: bool = False
) -> tuple[RankEncoder | None, str]:
    """``rank_encoder`` for a parsed ``tokenizer.json``: only a plain GPT-2 style one.

    Plain: no normalizer, truncation or padding; the ByteLevel pre-tokenizer with its
    regex and no prefix space; a BPE model without dropout, subword affixes or byte
    fallback; added tokens that match literally (no lstrip/rstrip/single_word).
    """
    def plain(value, *allowed):
        return value in allowed

    if config.get("normalizer") is not None:
        return None, "it has a normalizer"
    if config.get("truncation") is not None or config.get("padding") is not None:
        return None, "it truncates or pads"
    pre = config.get("pre_tokenizer") or {}
    if not (pre.get("type") == "ByteLevel" and pre.get("add_prefix_space") is False
            and pre.get("use_regex", True) is True):
        return None, "its pre-tokenizer is not GPT-2's ByteLevel (regex, no prefix space)"
    model = config.get("model") or {}
    if not (model.get("type") == "BPE" and model.get("dropout") is None
            and plain(model.get("continuing_subword_prefix"), None, "")
            and plain(model.get("end_of_word_suffix"), None, "")
            and not model.get("byte_fallback", False)):
        return None, "its model is not a plain BPE (dropout, subword affixes or byte fallback)"
    vocab = model.get("vocab")
    merges = model.get("merges")
    if not isinstance(vocab, dict) or not isinstance(merges, list):
        return None, "its model has no vocab/merges"
    added = {}
    for token in config.get("added_tokens") or []:
        if token.get("lstrip") or token.get("rstrip") or token.get("single_word"):
            return None, f"added token {token.get('content')!r} has lstrip/rstrip/single_word"
        if token.get("content"):
            added[token["content"]] = int(token["id"])
    if proven:  # every check passed before for these bytes: pairs made when first used
        return RankEncoder(vocab, [], added, written=merges), ""
    pairs = _pairs(merges)
    if any(len(pair) != 2 for pair in pairs):
        return None, "a merge is not a pair"
    if model.get("ignore_merges"):  # whole-word lookup: every word token must be a BPE result
        inner = set(vocab) - set(added)
        made = {a + b for a, b in pairs} | set(bytes_to_unicode().values())
        if inner - made:
            return None, "ignore_merges with vocabulary tokens no merge makes"
    return rank_encoder(vocab, pairs, added, proven=proven)
