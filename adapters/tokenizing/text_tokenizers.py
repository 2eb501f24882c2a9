"""Text tokenizers for preprocessing, by type name: ours and Megatron-LM's.

Ours: ``bytes``, ``huggingface`` (a ``tokenizer.json``), ``tiktoken`` (a ranks file).
Megatron's (``TOKENIZER_TYPES``, built in ``megadata_adapters.tokenizing.megatron_tokenizers``
except
``HuggingFaceTokenizer``): GPT2BPETokenizer, BertWordPieceLowerCase, BertWordPieceCase,
SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer,
HuggingFaceTokenizer, TikTokenizer, NullTokenizer. All load from local files only;
nothing here ever downloads. Each class meets ``megadata_core.preprocess.Tokenizer``
(``encode``, ``eod_id``, ``vocab_size``) and has ``encode_batch(texts) -> (ids,
lengths)``. Worker processes build their own tokenizer from a picklable factory::

    factory = functools.partial(load_tokenizer, "huggingface", "tokenizer.json")
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import threading
from collections.abc import Sequence

import numpy as np

from megadata_adapters.tokenizing import gigatoken_encoders as giga
from megadata_adapters.tokenizing import megatron_tokenizers as mt
from megadata_adapters.tokenizing import proof_cache
from megadata_adapters.tokenizing.byte_level_bpe import tokenizer_json_encoder
from megadata_core.errors import DataError
from megadata_core.preprocess import ByteTokenizer

__all__ = [
    "DEFAULT_SPLIT_PATTERN",
    "EOD_CANDIDATES",
    "TOKENIZER_TYPES",
    "HuggingFaceTokenizer",
    "TiktokenTokenizer",
    "load_tokenizer",
]

# Megatron-LM's --tokenizer-type names -> the files each takes (for --help and errors).
TOKENIZER_TYPES = {
    "GPT2BPETokenizer": "--vocab-file vocab.json --merge-file merges.txt",
    "BertWordPieceLowerCase": "--vocab-file vocab.txt",
    "BertWordPieceCase": "--vocab-file vocab.txt",
    "SentencePieceTokenizer": "--tokenizer-model x.model",
    "GPTSentencePieceTokenizer": "--tokenizer-model x.model",
    "Llama2Tokenizer": "--tokenizer-model x.model",
    "HuggingFaceTokenizer": "--tokenizer-model DIR or tokenizer.json",
    "TikTokenizer": "--tokenizer-model x.json [--tiktoken-pattern v1|v2]",
    "NullTokenizer": "--vocab-size N",
}

# Tried in order when no eod_token is named.
EOD_CANDIDATES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>")

# GPT-4 style pre-tokenization: contractions, letter runs with one leading
# non-letter, numbers of up to 3 digits, punctuation runs, newlines, spaces.
DEFAULT_SPLIT_PATTERN = "|".join(
    [
        r"'(?i:[sdmt]|ll|ve|re)",
        r"[^\r\n\p{L}\p{N}]?+\p{L}+",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]++[\r\n]*",
        r"\s*[\r\n]",
        r"\s+(?!\S)",
        r"\s+",
    ]
)


def _local_file(path, what: str) -> str:
    """``path`` as a string naming an existing local file (URLs are refused: no downloads)."""
    if path is None:
        raise DataError(f"{what}: a tokenizer file path is required")
    path = os.fspath(path)
    if "://" in path:
        raise DataError(f"{path}: {what} must be a local file; downloading is not supported")
    if not os.path.isfile(path):
        raise DataError(f"{path}: {what} file not found")
    return path


class HuggingFaceTokenizer(mt.RustTokenizer):
    """A ``tokenizer.json`` read by the ``tokenizers`` library.

    ``encode(text)`` -> int64[n] ids without added special tokens; ``eod_id`` is
    ``eod_token``'s id, or that of the first of EOD_CANDIDATES in the vocabulary. A
    plain GPT-2 style byte-level BPE is encoded by gigatoken or tiktoken, with the same
    ids (``megadata_adapters.tokenizing.gigatoken_encoders``,
    ``megadata_adapters.tokenizing.byte_level_bpe``); ``encoder``
    (auto, gigatoken, reference) chooses as ``gigatoken_encoders.choose`` says.
    """

    def __init__(
        self, path: str, eod_token: str | None = None, *, megatron: bool = False,
        encoder: str = "auto",
    ) -> None:
        self._arguments = ((path, eod_token), {"megatron": megatron,
                                               "encoder": giga.check_mode(encoder)})

        if megatron:  # Megatron's HuggingFaceTokenizer: a directory or its tokenizer.json
            path = mt.local_path(
                path, "--tokenizer-model", "HuggingFace tokenizer directory or tokenizer.json",
                directory_ok=True,
            )
            if os.path.isdir(path):
                path = os.path.join(path, "tokenizer.json")
                if not os.path.isfile(path):
                    raise DataError(
                        f"--tokenizer-model {os.path.dirname(path)}: no tokenizer.json in the "
                        "directory (only fast tokenizers' tokenizer.json files are read)"
                    )
        self.path = _local_file(path, "huggingface tokenizer")
        self.megatron = megatron
        mt.batch_threads()
        try:
            with open(self.path, "rb") as stream:
                raw = stream.read()
        except OSError as error:
            raise DataError(f"{self.path}: not a readable tokenizer.json: {error}") from None
        cached = None
        if encoder != "reference" and not giga.available():
            proof_key = proof_cache.key("byte-level BPE tokenizer.json", raw,
                                        ("gigatoken", "tokenizers"))
            cached = proof_key, proof_cache.load(proof_key, VERDICT_FIELDS)
        verdict = cached[1] if cached else None
        self._reference_lock = threading.Lock()
        self._hf = None
        if verdict is None or verdict["vocabulary"]:
            self._load_reference()  # else on first use: the file's vocabulary was proven
        config = json.loads(raw)  # readable: tokenizers read these bytes (now or before)
        if self._hf is None:
            vocabulary = _vocabulary(config)
            size = len(vocabulary)
        else:
            vocabulary = self._hf.get_vocab(with_added_tokens=True)
            size = self._hf.get_vocab_size(with_added_tokens=True)
        facts = None
        if verdict is None:
            same = _vocabulary(config) == vocabulary and size == len(vocabulary)
            facts = {"vocabulary": "" if same else
                     "the tokenizers library reads another vocabulary from it"}
        self._use_ranks(tokenizer_json_encoder(
            config, proven=verdict is not None and not verdict["canonical"]))
        self._use_gigatoken(encoder, lambda why: giga.unchecked_byte_level(config, why), cached,
                            written=raw.decode("utf-8"), facts=facts)
        if megatron:  # Megatron (transformers) uses len(tokenizer)
            self.vocab_size = size
        else:  # ids run up to the largest in the vocabulary, even when added tokens leave holes
            self.vocab_size = max(size, max(vocabulary.values(), default=-1) + 1)
        configured = _configured_eos(os.path.dirname(self.path)) if megatron else None
        if eod_token is None and configured is not None:
            eod_token = configured
        names = [eod_token] if eod_token is not None else list(EOD_CANDIDATES)
        for name in names:
            token_id = vocabulary.get(name)
            if token_id is not None:
                self.eod_token, self.eod_id = name, int(token_id)
                break
        else:
            if eod_token is not None:
                raise DataError(f"{self.path}: eod_token {eod_token!r} is not in the vocabulary")
            raise DataError(
                f"{self.path}: no end-of-document token found (tried {', '.join(names)}); "
                "name one with eod_token"
            )

    def _load_reference(self):
        """The ``tokenizers`` library's tokenizer of the file (loaded once)."""
        from tokenizers import Tokenizer as _HFTokenizer

        with self._reference_lock:
            if self._hf is None:
                try:
                    self._hf = _HFTokenizer.from_file(self.path)
                except Exception as error:  # tokenizers raises its own Exception type
                    flag = "--tokenizer-model " if self.megatron else ""
                    raise DataError(
                        f"{flag}{self.path}: not a readable tokenizer.json: {error}") from error
            return self._hf

    @property
    def _tokenizer(self):
        return self._hf if self._hf is not None else self._load_reference()

    def __repr__(self) -> str:
        return f"HuggingFaceTokenizer({self.path!r}, eod_token={self.eod_token!r})"


# A tokenizer.json's proof verdict: ``megadata_adapters.tokenizing.proof_cache`` fields ("" when
# proven):
# canonical merges, gigatoken's ids, what gigatoken loaded ("file" or "config"), and
# whether the file's own vocabulary (``_vocabulary``) is the one ``tokenizers`` reads.
VERDICT_FIELDS = ("canonical", "gigatoken", "load", "vocabulary")


def _vocabulary(config: dict) -> dict:
    """token -> id of a parsed ``tokenizer.json``: the model's vocabulary, then its added
    tokens (an added token's id wins, as in ``tokenizers``' ``get_vocab``)."""
    model = config.get("model") if isinstance(config, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    merged = dict(vocab) if isinstance(vocab, dict) else {}
    for token in config.get("added_tokens") or [] if isinstance(config, dict) else []:
        if isinstance(token, dict) and isinstance(token.get("content"), str):
            merged[token["content"]] = token.get("id")
    return merged


def _token_name(value) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _configured_eos(directory: str) -> str | None:
    """The EOD transformers gives Megatron: eos_token, else sep_token, from the config files."""
    found: dict[str, str] = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):  # the latter wins
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as stream:
                config = json.load(stream)
        except (OSError, ValueError) as error:
            raise DataError(f"--tokenizer-model {path}: not readable JSON: {error}") from None
        if isinstance(config, dict):
            for role in ("eos_token", "sep_token"):
                token = _token_name(config.get(role))
                if token is not None:
                    found[role] = token
    return found.get("eos_token", found.get("sep_token"))


class TiktokenTokenizer(mt.TiktokenDispatch):
    """A tiktoken BPE ranks file (lines ``base64(token) rank``) from a local path.

    The ranks must cover all 256 single bytes and be 0..n-1; the EOD token is a
    special token with id n, so ``vocab_size`` is n + 1. ``encode(text)`` ->
    uint32[k] ids, special-token strings in the text encoded as ordinary text.

    With the default expression (cl100k_base's), gigatoken encodes where its ids are
    proven tiktoken's (``gigatoken_encoders.tiktoken_ranks``); ``encoder`` (auto,
    gigatoken, reference) chooses as ``gigatoken_encoders.choose`` says, ``encoder``
    (the attribute) names the one in use and why. Pickles as its constructor call.
    """

    def __init__(
        self,
        path: str,
        pattern: str | None = None,
        eod_token: str = "<|endoftext|>",
        encoder: str = "auto",
    ) -> None:
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe

        self._arguments = ((path, pattern, eod_token), {"encoder": giga.check_mode(encoder)})
        self.path = os.path.abspath(_local_file(path, "tiktoken BPE"))
        with open(self.path, "rb") as stream:
            raw = stream.read()
        digest = hashlib.sha256(raw).hexdigest()
        try:
            # tiktoken caches files by path; the hash makes a stale cached copy re-read
            ranks = load_tiktoken_bpe(self.path, expected_hash=digest)
        except ValueError as error:
            raise DataError(f"{self.path}: not a tiktoken BPE file: {error}") from error
        if not ranks:
            raise DataError(f"{self.path}: no ranks in the BPE file")
        values = np.fromiter(ranks.values(), dtype=np.int64, count=len(ranks))
        if values.min() != 0 or values.max() != len(ranks) - 1 or np.unique(values).size != len(
            ranks
        ):
            raise DataError(
                f"{self.path}: ranks must be 0..{len(ranks) - 1} without gaps or repeats "
                f"(found {values.min()}..{values.max()})"
            )
        missing = [b for b in range(256) if bytes([b]) not in ranks]
        if missing:
            raise DataError(
                f"{self.path}: {len(missing)} single bytes have no rank (first: {missing[0]}); "
                "byte-level BPE needs all 256"
            )
        self.eod_token = eod_token
        self.eod_id = len(ranks)
        self.vocab_size = len(ranks) + 1
        self.pattern = DEFAULT_SPLIT_PATTERN if pattern is None else pattern
        self._encoding = tiktoken.Encoding(
            name=f"megadata:{os.path.basename(self.path)}",
            pat_str=self.pattern,
            mergeable_ranks=ranks,
            special_tokens={eod_token: self.eod_id},
        )
        self._giga, self.encoder = giga.choose(
            self._prove(raw, ranks, encoder), encoder, "tiktoken")

    def _prove(self, raw: bytes, ranks: dict, encoder: str):
        """``gigatoken_encoders.tiktoken_ranks``'s (encoder | None, why), its verdict cached."""
        if encoder == "reference":
            return None, ""
        if self.pattern != DEFAULT_SPLIT_PATTERN:
            return None, ("no gigatoken pre-tokenizer is known to split as this expression "
                          "(measured for cl100k_base's only)")
        why = giga.available()
        if why:
            return None, why
        return proof_cache.proven_once(
            f"tiktoken ranks, scheme {giga.CL100K_SCHEME}", raw + b"\0" + self.pattern.encode(),
            ("gigatoken", "tiktoken"), lambda proven: giga.tiktoken_ranks(
                self.path, ranks, giga.CL100K_SCHEME, self._reference, proven=proven))

    def __reduce__(self):
        arguments, options = self._arguments
        return functools.partial(TiktokenTokenizer, **options), arguments

    @property
    def block_encoder(self):
        """The proven gigatoken encoder for the block pipeline (None: tiktoken's)."""
        return self._giga

    def _reference(self, text: str) -> np.ndarray:
        return self._encoding.encode_to_numpy(text, disallowed_special=())

    def _reference_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        threads = mt.batch_threads()
        return mt.flatten_ids(
            self._encoding.encode_ordinary_batch(list(texts), num_threads=threads)
        )

    def __repr__(self) -> str:
        return f"TiktokenTokenizer({self.path!r}, eod_token={self.eod_token!r})"


_LOADED: dict[tuple, object] = {}  # the last few tokenizers built, by arguments and files


def _files_of(path, options: dict) -> tuple:
    """Identities (path, size, mtime) of the files a tokenizer reads: a changed file is a
    new tokenizer."""
    names = [path, *(options.get(k) for k in ("vocab_file", "merge_file", "tokenizer_model"))]
    found = []
    for name in filter(None, names):
        name = os.fspath(name)
        members = [os.path.join(name, f) for f in ("tokenizer.json", "tokenizer_config.json",
                                                   "special_tokens_map.json")]
        for file in members if os.path.isdir(name) else [name]:
            with contextlib.suppress(OSError):
                stat = os.stat(file)
                found.append((os.path.abspath(file), stat.st_size, stat.st_mtime_ns))
    return tuple(found)


def load_tokenizer(kind: str, path: str | None = None, **options):
    """``build_tokenizer``, remembered: a second call with the same arguments and files
    returns the same tokenizer, so pool workers forked after the first load (the driver
    loads it to check it) inherit it instead of proving and loading it again."""
    key = (kind, path, tuple(sorted((k, repr(v)) for k, v in options.items())),
           _files_of(path, options))
    tokenizer = _LOADED.get(key)
    if tokenizer is None:
        tokenizer = build_tokenizer(kind, path, **options)
        while len(_LOADED) >= 4:
            _LOADED.pop(next(iter(_LOADED)))
        _LOADED[key] = tokenizer
    return tokenizer


def build_tokenizer(kind: str, path: str | None = None, **options):
    """A tokenizer by type name: ours (``bytes``, ``huggingface``, ``tiktoken``) or Megatron's.

    Megatron's types take keyword options named as its flags: ``vocab_file``,
    ``merge_file`` (GPT2BPETokenizer; BERT types take ``vocab_file``), ``tokenizer_model``
    (``path`` is the same), ``tiktoken_pattern``, ``tiktoken_num_special_tokens``,
    ``vocab_size``. ``functools.partial(load_tokenizer, kind, path, **options)`` is a
    picklable factory for ``megadata_core.preprocess.preprocess_jsonl``.

    ``encoder``: ``auto`` (default; gigatoken where its ids are proven the reference's,
    for byte-level BPE, SentencePiece BPE, tiktoken ranks and TikTokenizer ``v2``
    types), ``reference`` (never gigatoken) or
    ``gigatoken`` (Megatron's ``--use-gigatoken``: gigatoken's ids even unproven; a
    DataError for types gigatoken cannot run).
    """
    encoder = giga.check_mode(options.pop("encoder", "auto"))
    if encoder != "auto" and kind in GIGATOKEN_TYPES:
        options["encoder"] = encoder
    elif encoder == "gigatoken":
        raise DataError(
            f"--use-gigatoken: gigatoken does not run --tokenizer-type {kind} (it runs "
            f"{', '.join(sorted(GIGATOKEN_TYPES))})"
        )
    if kind == "bytes":
        if options or path is not None:
            raise DataError(f"tokenizer 'bytes' takes no files or options, got {sorted(options)}")
        return ByteTokenizer()
    if kind == "huggingface":
        return HuggingFaceTokenizer(path, **options)
    if kind == "tiktoken":
        return TiktokenTokenizer(path, **options)
    if kind in TOKENIZER_TYPES:
        return _load_megatron(kind, path, dict(options))
    raise DataError(
        f"--tokenizer-type: {kind!r} is not one of 'bytes', 'huggingface', 'tiktoken', "
        + ", ".join(repr(name) for name in TOKENIZER_TYPES)
    )


# The types gigatoken can encode (where proven: megadata_adapters.tokenizing.gigatoken_encoders).
GIGATOKEN_TYPES = {"huggingface", "tiktoken", "GPT2BPETokenizer", "SentencePieceTokenizer",
                   "GPTSentencePieceTokenizer", "Llama2Tokenizer", "HuggingFaceTokenizer",
                   "TikTokenizer"}

_TAKES = {  # the options each Megatron type reads
    "GPT2BPETokenizer": {"vocab_file", "merge_file", "encoder"},
    "BertWordPieceLowerCase": {"vocab_file"},
    "BertWordPieceCase": {"vocab_file"},
    "SentencePieceTokenizer": {"tokenizer_model", "encoder"},
    "GPTSentencePieceTokenizer": {"tokenizer_model", "encoder"},
    "Llama2Tokenizer": {"tokenizer_model", "encoder"},
    "HuggingFaceTokenizer": {"tokenizer_model", "eod_token", "encoder"},
    "TikTokenizer": {
        "tokenizer_model", "tiktoken_pattern", "tiktoken_num_special_tokens", "vocab_size",
        "encoder",
    },
    "NullTokenizer": {"vocab_size"},
}


def _load_megatron(kind: str, path: str | None, options: dict):
    if path is not None:
        if options.get("tokenizer_model") not in (None, path):
            raise DataError(f"--tokenizer-model given twice: {path!r} and "
                            f"{options['tokenizer_model']!r}")
        options["tokenizer_model"] = path
    given = {name for name, value in options.items() if value is not None}
    extra = sorted(given - _TAKES[kind])
    if extra:
        flags = ", ".join("--" + name.replace("_", "-") for name in extra)
        raise DataError(
            f"--tokenizer-type {kind} takes {TOKENIZER_TYPES[kind]}; {flags} does not apply"
        )
    get = options.get
    encoder = get("encoder") or "auto"
    if kind == "GPT2BPETokenizer":
        return mt.GPT2BPETokenizer(get("vocab_file"), get("merge_file"), encoder=encoder)
    if kind.startswith("BertWordPiece"):
        return mt.BertWordPieceTokenizer(get("vocab_file"), lower_case=kind.endswith("LowerCase"))
    if kind in ("SentencePieceTokenizer", "GPTSentencePieceTokenizer", "Llama2Tokenizer"):
        return mt.SentencePieceTokenizer(get("tokenizer_model"), type_name=kind, encoder=encoder)
    if kind == "HuggingFaceTokenizer":
        return HuggingFaceTokenizer(get("tokenizer_model"), get("eod_token"), megatron=True,
                                    encoder=encoder)
    if kind == "TikTokenizer":
        return mt.MegatronTikTokenizer(
            get("tokenizer_model"),
            pattern=get("tiktoken_pattern") or "v2",
            num_special_tokens=get("tiktoken_num_special_tokens") or 1000,
            vocab_size=get("vocab_size"),
            encoder=encoder,
        )
    return mt.NullTokenizer(get("vocab_size"))
