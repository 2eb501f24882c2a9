"""Megatron-LM's tokenizer types, read from the files Megatron users have.

Each class meets ``megadata_core.preprocess.Tokenizer`` (``encode``, ``eod_id``,
``vocab_size``) and adds ``encode_batch(texts) -> (ids, lengths)``, which runs the
whole batch through the library's native batch encoder. Ids, EOD and vocabulary
size are those Megatron-LM 0.16.1's ``tools/preprocess_data.py`` uses:

===========================  =======================================  ==============================
type                         files                                    EOD
===========================  =======================================  ==============================
GPT2BPETokenizer             vocab.json + merges.txt                  ``<|endoftext|>``
BertWordPieceLowerCase       vocab.txt                                ``[EOS]`` (added after the
/ BertWordPieceCase                                                   vocabulary, after ``[BOS]``)
SentencePieceTokenizer,      x.model                                  the model's eos piece
GPTSentencePieceTokenizer,
Llama2Tokenizer
TikTokenizer                 Megatron's JSON ranks list               ``</s>`` (id 2)
NullTokenizer                none (``vocab_size``)                    ``vocab_size``
===========================  =======================================  ==============================

Megatron builds GPT2BPE and BERT through its legacy classes when it runs offline
(its default path asks the HuggingFace hub for ``gpt2`` / ``bert-large-*`` configs),
so those follow ``megatron/training/tokenizer``; the others follow
``megatron/core/tokenizers`` (the default of ``preprocess_data.py``). Files are
only read locally.

gigatoken encodes GPT2BPETokenizer, the SentencePiece types and TikTokenizer with
``--tiktoken-pattern v2`` where a load-time proof shows it gives the reference encoder's
ids (``megadata_adapters.tokenizing.gigatoken_encoders``); each class's ``encoder``
says which runs and why, its ``encoder`` argument (auto, gigatoken, reference) chooses.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import os
from collections.abc import Sequence

import numpy as np

from megadata_adapters.tokenizing import gigatoken_encoders as giga
from megadata_adapters.tokenizing import gigatoken_sentencepiece as giga_sentencepiece
from megadata_adapters.tokenizing import proof_cache
from megadata_adapters.tokenizing.byte_level_bpe import rank_encoder
from megadata_core.errors import DataError

__all__ = [
    "BertWordPieceTokenizer",
    "GPT2BPETokenizer",
    "MegatronTikTokenizer",
    "NullTokenizer",
    "RustTokenizer",
    "SentencePieceTokenizer",
    "TIKTOKEN_PATTERNS",
    "batch_threads",
    "flatten_ids",
    "local_path",
]

# Megatron's tiktoken split patterns ("v1", "v2").
TIKTOKEN_PATTERNS = {
    "v1": r"[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
    "v2": (
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
        r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
        r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ),
}
# Megatron's TikTokenizer special tokens; the rest of num_special_tokens are fillers.
TIKTOKEN_SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>")


def local_path(path, flag: str, what: str, *, directory_ok: bool = False) -> str:
    """``path`` as a string naming an existing local file (or directory when allowed)."""
    if path is None or path == "":
        raise DataError(f"{flag}: a {what} is required")
    path = os.fspath(path)
    if "://" in path:
        raise DataError(f"{flag} {path}: must be a local {what}; downloading is not supported")
    if os.path.isdir(path) and not directory_ok:
        raise DataError(f"{flag} {path}: is a directory, expected a {what}")
    if not (os.path.isfile(path) or (directory_ok and os.path.isdir(path))):
        raise DataError(f"{flag} {path}: {what} not found")
    return path


def _read_text(path: str, flag: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as stream:
            return stream.read()
    except UnicodeDecodeError as error:
        raise DataError(
            f"{flag} {path}: not a {what} (invalid UTF-8 at byte {error.start})"
        ) from None


def batch_threads() -> int:
    """Threads a native batch encoder may use: one inside a worker process (the pool is
    the parallelism; more would oversubscribe the cores), every core otherwise."""
    import multiprocessing

    if multiprocessing.parent_process() is not None:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # read by tokenizers per call
        return 1
    return os.cpu_count() or 1


def flatten_ids(lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(int64[sum n_i] ids, int64[len(lists)] lengths) of per-text id lists."""
    lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    ids = np.fromiter(
        itertools.chain.from_iterable(lists), dtype=np.int64, count=int(lengths.sum())
    )
    return ids, lengths


def _rebuild(cls, args: tuple, kwargs: dict):
    return cls(*args, **kwargs)


class GigaFirst:
    """``encode`` and ``encode_batch`` of a tokenizer with a reference encoder
    (``_reference(text)``, ``_reference_batch(texts) -> (ids, lengths)``) and, when its ids
    are proven, a gigatoken ``block_encoder`` taken first: for every text but those holding
    a character it is not proven on. ``ids_dtype``: the dtype ``encode`` returns."""

    block_encoder = None
    ids_dtype = np.int64

    def encode(self, text: str) -> np.ndarray:
        """``ids_dtype``[n] ids of ``text``."""
        if self.block_encoder is not None and not self.block_encoder.needs_reference(text):
            return self.block_encoder.encode(text).astype(self.ids_dtype, copy=False)
        if self.block_encoder is not None and self.block_encoder.cuts is not None:
            return self.encode_batch([text])[0].astype(self.ids_dtype, copy=False)  # in pieces
        return np.asarray(self._reference(text), dtype=self.ids_dtype)

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(int64 ids of all texts concatenated, int64[len(texts)] lengths)."""
        if self.block_encoder is not None:
            return giga.batch(self.block_encoder, texts, self._reference_batch)
        return self._reference_batch(texts)


class RustTokenizer(GigaFirst):
    """Shared encode/decode over a ``tokenizers.Tokenizer`` without added special tokens.

    ``_ranks``: a ``byte_level_bpe.RankEncoder`` giving the same ids faster, used when
    set; ``_giga``: a ``gigatoken_encoders.GigaEncoder`` proven to give them, used first
    (``block_encoder`` hands it to the block pipeline); ``encoder`` names the one in use
    (and why not the faster ones) for logs. Pickles as its constructor call.
    """

    _tokenizer = None
    _ranks = None
    _why = ""
    _giga = None
    _arguments: tuple = ((), {})
    encoder = "tokenizers"

    def __reduce__(self):
        return _rebuild, (type(self), *self._arguments)

    def _use_ranks(self, found) -> None:
        """Take ``(RankEncoder | None, why)`` from ``byte_level_bpe``."""
        self._ranks, self._why = found
        self.encoder = (
            "tiktoken (canonical byte-level BPE merges: same ids as tokenizers)"
            if self._ranks is not None else f"tokenizers (not tiktoken: {self._why})"
        )

    def _use_gigatoken(self, mode: str, unchecked=None, cached=None, written=None,
                       facts=None) -> None:
        """Prove gigatoken for this BPE (after ``_use_ranks``, whose canonical merges it
        needs too), under ``mode`` (auto, gigatoken or reference; ``unchecked(why)``:
        gigatoken as Megatron's ``--use-gigatoken`` runs it). ``cached``: (proof key,
        verdict or None) of ``megadata_adapters.tokenizing.proof_cache`` for this tokenizer's file:
        a stored
        verdict is reused, a new one stored (with ``facts``, more of its fields).
        ``written``: the ``tokenizer.json`` as written (``giga.byte_level``)."""
        ranks = self._ranks
        proof_key, verdict = cached if cached is not None else (None, None)
        if ranks is not None and mode != "reference":
            if verdict is not None and verdict["gigatoken"]:
                found = None, verdict["gigatoken"]
            else:
                proven = verdict["load"] if verdict is not None else ""
                # (a proven file as written loads without its merges: pairs not made)
                merges = () if proven == "file" and written is not None else ranks.merges
                found = giga.byte_level(ranks.vocab, merges, ranks.added, self._pair_merging,
                                        written=written, proven=proven)
                if proof_key is not None and verdict is None and not giga.available():
                    proof_cache.store(proof_key, {
                        "canonical": "", "gigatoken": found[1], **(facts or {}),
                        "load": found[0].loaded_from if found[0] is not None else ""})
        else:
            found = None, self._why
        reference = "tiktoken" if ranks is not None else "tokenizers"
        self._giga, line = giga.choose(found, mode, reference, unchecked)
        if self._giga is not None or mode == "reference":
            self.encoder = line
        elif ranks is None:
            self.encoder = f"tokenizers (not tiktoken or gigatoken: {self._why})"
        else:
            self.encoder = f"tiktoken (canonical byte-level BPE merges; not gigatoken: {found[1]})"

    @property
    def block_encoder(self):
        return self._giga

    def _pair_merging(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def _reference(self, text: str) -> np.ndarray:
        if self._ranks is not None:
            return self._ranks.encode(text)
        return np.array(self._tokenizer.encode(text, add_special_tokens=False).ids, np.int64)

    def _reference_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        if self._ranks is not None:
            return self._ranks.encode_batch(texts)
        encodings = self._tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        return flatten_ids([encoding.ids for encoding in encodings])

    def decode(self, ids) -> str:
        return self._tokenizer.decode([int(i) for i in np.asarray(ids).reshape(-1)])


class GPT2BPETokenizer(RustTokenizer):
    """GPT-2 byte-level BPE from ``vocab.json`` and ``merges.txt`` (Megatron's GPT2BPETokenizer).

    The merges file is read as Megatron reads it: its first line (``#version``) and
    its last line (empty after the final newline) are skipped.
    """

    def __init__(self, vocab_file, merge_file, encoder: str = "auto") -> None:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        self._arguments = ((vocab_file, merge_file), {"encoder": giga.check_mode(encoder)})

        self.vocab_file = local_path(vocab_file, "--vocab-file", "GPT-2 vocab.json file")
        self.merge_file = local_path(merge_file, "--merge-file", "GPT-2 merges.txt file")
        try:
            vocab = json.loads(_read_text(self.vocab_file, "--vocab-file", "vocab.json"))
        except json.JSONDecodeError as error:
            raise DataError(
                f"--vocab-file {self.vocab_file}: not a GPT-2 vocab.json ({error.msg} at line "
                f"{error.lineno}); BERT's vocab.txt goes with BertWordPiece* types"
            ) from None
        if not isinstance(vocab, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in vocab.values()
        ):
            raise DataError(
                f"--vocab-file {self.vocab_file}: a GPT-2 vocab.json maps token strings to ids"
            )
        lines = _read_text(self.merge_file, "--merge-file", "merges.txt").split("\n")[1:-1]
        merges = [tuple(line.split()) for line in lines]
        bad = next((i for i, pair in enumerate(merges) if len(pair) not in (0, 2)), None)
        if bad is not None:
            raise DataError(
                f"--merge-file {self.merge_file}: line {bad + 2} is {lines[bad]!r}, not a pair "
                "of tokens separated by a space"
            )
        merges = [pair for pair in merges if pair]  # blank lines never match, as in Megatron
        try:
            model = models.BPE(vocab=vocab, merges=merges)
        except Exception as error:  # tokenizers raises its own Exception type
            raise DataError(
                f"--merge-file {self.merge_file}: does not fit --vocab-file "
                f"{self.vocab_file}: {error}"
            ) from error
        tokenizer = Tokenizer(model)
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tokenizer.decoder = decoders.ByteLevel()
        self._tokenizer = tokenizer
        batch_threads()
        if "<|endoftext|>" not in vocab:
            raise DataError(f"--vocab-file {self.vocab_file}: no '<|endoftext|>' token (the EOD)")
        self._use_ranks(rank_encoder(vocab, merges))
        self._use_gigatoken(encoder, lambda why: giga.unchecked_byte_level({
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
            "model": {"type": "BPE", "vocab": vocab, "merges": [list(m) for m in merges]},
        }, why))
        self.eod_id = int(vocab["<|endoftext|>"])
        self.vocab_size = len(vocab)

    def __repr__(self) -> str:
        return f"GPT2BPETokenizer({self.vocab_file!r}, {self.merge_file!r})"


class BertWordPieceTokenizer(RustTokenizer):
    """BERT WordPiece from ``vocab.txt`` (Megatron's BertWordPieceLowerCase/BertWordPieceCase).

    Lower case also strips accents, as BERT's uncased models do. ``[BOS]`` and
    ``[EOS]`` are appended to the vocabulary when absent; EOD is ``[EOS]``.
    """

    def __init__(self, vocab_file, lower_case: bool) -> None:
        from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

        self._arguments = ((vocab_file, lower_case), {})
        self.vocab_file = local_path(vocab_file, "--vocab-file", "BERT vocab.txt file")
        self.lower_case = bool(lower_case)
        text = _read_text(self.vocab_file, "--vocab-file", "BERT vocab.txt")
        lines = text.split("\n")  # newlines already universal, as Megatron's readline sees them
        if lines[-1] == "":
            lines.pop()
        vocab: dict[str, int] = {}
        for index, line in enumerate(lines):
            vocab[line.strip()] = index
        if text.lstrip().startswith("{"):
            raise DataError(
                f"--vocab-file {self.vocab_file}: looks like a JSON vocabulary; BERT types take "
                "a vocab.txt with one token a line (GPT2BPETokenizer takes vocab.json)"
            )
        if "[UNK]" not in vocab:
            raise DataError(f"--vocab-file {self.vocab_file}: no '[UNK]' token in the BERT vocab")
        model = models.WordPiece(vocab=dict(vocab), unk_token="[UNK]", max_input_chars_per_word=200)
        tokenizer = Tokenizer(model)
        tokenizer.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lower_case
        )
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece()
        self._tokenizer = tokenizer
        batch_threads()
        for token in ("[BOS]", "[EOS]"):  # Megatron adds these after the vocabulary
            vocab.setdefault(token, len(vocab))
        self.eod_id = vocab["[EOS]"]
        self.vocab_size = len(vocab)

    def __repr__(self) -> str:
        return f"BertWordPieceTokenizer({self.vocab_file!r}, lower_case={self.lower_case})"


class SentencePieceTokenizer(GigaFirst):
    """A SentencePiece ``.model`` (Megatron's SentencePieceTokenizer, GPTSentencePieceTokenizer,
    Llama2Tokenizer): plain ``encode`` ids, EOD = the model's eos id, vocab_size = its pieces.
    A model without an eos piece has ``eod_id`` -1, which ``--append-eod`` refuses.
    gigatoken encodes when its ids are proven sentencepiece's (``gigatoken_encoders``);
    ``encoder`` says which runs."""

    def __init__(
        self, model_file, type_name: str = "SentencePieceTokenizer", encoder: str = "auto"
    ) -> None:
        import sentencepiece

        self.model_file = local_path(model_file, "--tokenizer-model", "SentencePiece .model file")
        self.type_name = type_name
        self.mode = giga.check_mode(encoder)
        with open(self.model_file, "rb") as stream:
            proto = stream.read()
        self._processor = sentencepiece.SentencePieceProcessor()
        try:
            self._processor.LoadFromSerializedProto(proto)
        except (RuntimeError, OSError) as error:
            raise DataError(
                f"--tokenizer-model {self.model_file}: not a SentencePiece model ({error})"
            ) from None
        self.eod_id = int(self._processor.eos_id())
        self.vocab_size = int(self._processor.get_piece_size())
        self._threads = batch_threads()
        found = (None, "--encoder reference") if self.mode == "reference" else self._prove(proto)
        self.block_encoder, self.encoder = giga.choose(found, self.mode, "sentencepiece")

    def _prove(self, proto: bytes):
        """``gigatoken_sentencepiece.sentencepiece``'s (encoder | None, why), its verdict
        cached (``proof_cache``) for these bytes and library versions."""
        why = giga.available()
        if why:
            return None, why
        return proof_cache.proven_once(
            "sentencepiece", proto, ("gigatoken", "sentencepiece", "tokenizers"),
            lambda proven: giga_sentencepiece.sentencepiece(
                proto, self._reference, self._reference_batch, self._processor.normalize,
                proven=proven))

    def _reference(self, text: str) -> list[int]:
        return self._processor.encode(text, out_type=int)

    def _reference_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        return flatten_ids(
            self._processor.encode(list(texts), out_type=int, num_threads=self._threads)
        )

    def decode(self, ids) -> str:
        return self._processor.decode([int(i) for i in np.asarray(ids).reshape(-1)])

    def __getstate__(self):  # the processor itself does not pickle; reload from the file
        return {"model_file": self.model_file, "type_name": self.type_name, "mode": self.mode}

    def __setstate__(self, state) -> None:
        self.__init__(state["model_file"], state["type_name"], state.get("mode", "auto"))

    def __repr__(self) -> str:
        return f"SentencePieceTokenizer({self.model_file!r}, type_name={self.type_name!r})"


class TiktokenDispatch(GigaFirst):
    """:class:`GigaFirst` over a tiktoken ``_encoding`` (uint32 ids, as tiktoken's)."""

    ids_dtype = np.uint32

    def decode(self, ids) -> str:
        return self._encoding.decode([int(i) for i in np.asarray(ids).reshape(-1)])


class MegatronTikTokenizer(TiktokenDispatch):
    """Megatron's TikTokenizer: a JSON list of ``{"rank", "token_bytes", "token_str"}``.

    Ids 0..num_special_tokens-1 are special (``<unk> <s> </s> <mask> <pad> <cls> <sep>``
    then ``<SPECIAL_k>`` fillers), BPE ranks follow, the first
    ``vocab_size - num_special_tokens`` of them used. EOD is ``</s>`` (2). Special-token
    strings in the text are encoded as those tokens (Megatron's ``allowed_special="all"``).

    With the ``v2`` expression gigatoken encodes (its ``nemotron`` scheme, measured to split
    alike) where its ids are proven tiktoken's (``gigatoken_encoders.megatron_tiktoken``,
    the verdict cached by ``megadata_adapters.tokenizing.proof_cache``); ``v1`` splits as no
    gigatoken scheme
    and stays on tiktoken. ``encoder`` (auto, gigatoken, reference) chooses as
    ``gigatoken_encoders.choose`` says; the ``encoder`` attribute names the one in use and
    why. Pickles as its constructor call.
    """

    def __init__(
        self,
        path,
        pattern: str = "v2",
        num_special_tokens: int = 1000,
        vocab_size: int | None = None,
        encoder: str = "auto",
    ) -> None:
        import tiktoken

        self._arguments = (path, pattern, num_special_tokens, vocab_size, encoder)
        self.mode = giga.check_mode(encoder)
        self.path = local_path(path, "--tokenizer-model", "TikTokenizer JSON vocabulary file")
        if pattern not in TIKTOKEN_PATTERNS:
            raise DataError(f"--tiktoken-pattern: {pattern!r} is not one of 'v1', 'v2'")
        vocab_size = 2**17 if vocab_size is None else int(vocab_size)
        num_special_tokens = int(num_special_tokens)
        if not len(TIKTOKEN_SPECIAL_TOKENS) <= num_special_tokens < vocab_size:
            raise DataError(
                f"--tiktoken-num-special-tokens: {num_special_tokens} must be at least "
                f"{len(TIKTOKEN_SPECIAL_TOKENS)} and below --vocab-size {vocab_size}"
            )
        with open(self.path, "rb") as stream:
            raw = stream.read()
        ranks = self._read_ranks(raw, vocab_size - num_special_tokens, num_special_tokens)
        specials = list(TIKTOKEN_SPECIAL_TOKENS) + [
            f"<SPECIAL_{i}>" for i in range(len(TIKTOKEN_SPECIAL_TOKENS), num_special_tokens)
        ]
        self.pattern, self.num_special_tokens = pattern, num_special_tokens
        self._threads = batch_threads()
        self.eod_id = TIKTOKEN_SPECIAL_TOKENS.index("</s>")
        self.vocab_size = vocab_size
        self._encoding = tiktoken.Encoding(
            name=f"megatron:{os.path.basename(self.path)}",
            pat_str=TIKTOKEN_PATTERNS[pattern],
            mergeable_ranks=ranks,
            special_tokens={token: i for i, token in enumerate(specials)},
        )
        found = self._prove(raw, ranks, specials)
        self.block_encoder, self.encoder = giga.choose(found, self.mode, "tiktoken")

    def _prove(self, raw: bytes, ranks: dict[bytes, int], specials: list[str]):
        """``gigatoken_encoders.megatron_tiktoken``'s (encoder | None, why), its verdict
        cached per file bytes, pattern, special tokens, vocab_size and library versions."""
        if self.mode == "reference":
            return None, ""
        scheme = giga.MEGATRON_SCHEMES.get(self.pattern)
        if scheme is None:
            return None, (f"Megatron's {self.pattern} expression splits as none of "
                          "gigatoken's pre-tokenizer schemes (measured)")
        why = giga.available()
        if why:
            return None, why
        options = f"{self.pattern} {len(specials)} {len(ranks)}".encode()
        return proof_cache.proven_once(
            f"Megatron TikTokenizer ranks, scheme {scheme}", raw + b"\0" + options,
            ("gigatoken", "tiktoken"), lambda proven: giga.megatron_tiktoken(
                list(ranks), specials, scheme, self._reference, proven=proven))

    def _read_ranks(self, raw: bytes, inner_size: int, offset: int) -> dict[bytes, int]:
        """{token bytes: id} of the first ``inner_size`` ranks of the file's bytes ``raw``,
        ids = ranks + ``offset``, in rank order."""
        where = f"--tokenizer-model {self.path}"
        if not self.path.endswith(".json"):
            raise DataError(f"{where}: TikTokenizer takes Megatron's JSON vocabulary (*.json)")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise DataError(
                f"{where}: not a JSON vocabulary (invalid UTF-8 at byte {error.start})"
            ) from None
        try:
            vocab = json.loads(text)
        except json.JSONDecodeError as error:
            raise DataError(f"{where}: not JSON ({error.msg} at line {error.lineno})") from None
        if not isinstance(vocab, list):
            raise DataError(f"{where}: expected a JSON list of rank entries")
        if len(vocab) < inner_size:
            raise DataError(
                f"{where}: {len(vocab)} ranks, fewer than --vocab-size minus "
                f"--tiktoken-num-special-tokens = {inner_size}"
            )
        ranks: dict[bytes, int] = {}
        for i, entry in enumerate(vocab[:inner_size]):
            if not isinstance(entry, dict) or entry.keys() != {"rank", "token_bytes", "token_str"}:
                raise DataError(f"{where}: entry {i} is not {{rank, token_bytes, token_str}}")
            try:
                token = base64.b64decode(entry["token_bytes"], validate=True)
            except (binascii.Error, TypeError):
                raise DataError(f"{where}: entry {i} has invalid base64 token_bytes") from None
            if entry["rank"] != i or (i < 256 and token != bytes([i])):
                raise DataError(f"{where}: entry {i} has rank {entry['rank']!r} / bytes {token!r}")
            ranks[token] = i + offset
        if len(ranks) != inner_size:
            raise DataError(f"{where}: repeated token_bytes among the first {inner_size} ranks")
        return ranks

    def _reference(self, text: str) -> np.ndarray:
        return self._encoding.encode_to_numpy(text, allowed_special="all")

    def _reference_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        return flatten_ids(self._encoding.encode_batch(
            list(texts), num_threads=self._threads, allowed_special="all"
        ))

    def __getstate__(self):  # gigatoken does not pickle; rebuilt (the verdict cached)
        return {"arguments": self._arguments}

    def __setstate__(self, state) -> None:
        self.__init__(*state["arguments"])

    def __repr__(self) -> str:
        return f"MegatronTikTokenizer({self.path!r}, pattern={self.pattern!r})"


class NullTokenizer:
    """Texts of space-separated integers are their own ids (Megatron's NullTokenizer).

    EOD is ``vocab_size`` (the argument); the vocabulary holds ``vocab_size + 1`` ids.
    """

    def __init__(self, vocab_size) -> None:
        if vocab_size is None or int(vocab_size) < 1:
            raise DataError(
                f"--vocab-size: NullTokenizer needs a vocabulary size >= 1, got {vocab_size}"
            )
        self.eod_id = int(vocab_size)
        self.vocab_size = int(vocab_size) + 1

    def encode(self, text: str) -> np.ndarray:
        """int64[n] of ``int(x) for x in text.split(' ')``."""
        try:
            return np.array([int(x) for x in text.split(" ")], dtype=np.int64)
        except (ValueError, OverflowError):
            raise DataError(
                f"NullTokenizer: text {text[:40]!r} is not integers separated by single spaces"
            ) from None

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(int64 ids of all texts concatenated, int64[len(texts)] lengths)."""
        arrays = [self.encode(text) for text in texts]
        lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
        ids = np.concatenate(arrays) if arrays else np.empty(0, np.int64)
        return ids, lengths

    def decode(self, ids) -> str:
        return " ".join(str(int(i)) for i in np.asarray(ids).reshape(-1))

    def __repr__(self) -> str:
        return f"NullTokenizer(vocab_size={self.eod_id})"
