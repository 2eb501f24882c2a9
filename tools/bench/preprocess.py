"""Items of the ``format`` suite (tools/bench/format.py) for preprocessing with real tokenizers.

Usage::

    python tools/bench.py format --only preprocess-gpt2,preprocess-hf,sentences

* ``preprocess-gpt2`` / ``preprocess-hf``: documents/s, MB/s and tokens/s turning the
  same jsonl into a corpus with Megatron's ``GPT2BPETokenizer`` (vocab.json + merges.txt)
  and ``HuggingFaceTokenizer`` (a tokenizer.json directory), both trained here on the
  input (16k byte-level BPE). Ours: ``preprocess_jsonl`` (chunks through each
  tokenizer's batch encoder; for these canonical byte-level merges that is tiktoken,
  adapters/tokenizing/byte_level_bpe.py). Two peers, both Megatron-LM's method re-implemented
  (its script is not in the megatron-core wheel): the main process reads lines into
  ``Pool.imap(encode, lines, chunksize=32)``, each worker encodes one document at a
  time and appends the EOD, the main process calls ``add_document`` per document
  (megatron-core's IndexedDatasetBuilder). ``megatron`` encodes as Megatron does:
  GPT-2's pure-Python BPE (``MegatronStyleGPT2BPE``) for GPT2BPETokenizer,
  ``transformers.AutoTokenizer(use_fast=False)`` ``tokenize`` + ``convert_tokens_to_ids``
  for HuggingFaceTokenizer (the bench extra installs transformers). ``rust`` encodes
  with the ``tokenizers`` library, one document per call: a stricter peer than
  Megatron itself. Every corpus must be byte-identical to ours.
* ``sentences``: MB/s of the sentence splitter ``--split-sentences`` uses by default
  offline (sentencex), and of NLTK punkt when a model is installed.

The items reach tools/bench.py only through the ``Bench`` object and the helpers given.
"""

from __future__ import annotations

import filecmp
import functools
import json
import multiprocessing
import os
import shutil
import statistics

import numpy as np

from bench.harness import measure

_PEER = None  # (tokenizer, eod) in each peer worker


def _texts(jsonl: str) -> list[str]:
    with open(jsonl, encoding="utf-8") as stream:
        return [json.loads(line)["text"] for line in stream]


def train_tokenizer_files(jsonl: str, directory: str, vocab_size: int = 16_000) -> dict:
    """GPT-2 style vocab.json + merges.txt and a HF directory, trained on the input."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_texts(jsonl)[:20_000], trainer)
    os.makedirs(directory, exist_ok=True)
    tokenizer.model.save(directory)
    hf = os.path.join(directory, "hf")
    os.makedirs(hf, exist_ok=True)
    tokenizer.save(os.path.join(hf, "tokenizer.json"))
    with open(os.path.join(hf, "tokenizer_config.json"), "w") as stream:
        json.dump({"eos_token": "<|endoftext|>"}, stream)
    return {
        "GPT2BPETokenizer": {"vocab_file": os.path.join(directory, "vocab.json"),
                             "merge_file": os.path.join(directory, "merges.txt")},
        "HuggingFaceTokenizer": {"tokenizer_model": hf},
    }


class MegatronStyleGPT2BPE:
    """GPT-2's original pure-Python byte-level BPE, the encoder Megatron-LM's
    GPT2BPETokenizer runs (megatron/training/tokenizer/gpt2_tokenization.py): the
    ``regex`` module splits the text with GPT-2's pattern, each piece's UTF-8 bytes are
    mapped to printable characters, and a piece is merged by repeatedly joining every
    occurrence of its adjacent pair listed first in merges.txt; results are memoized
    per piece in a dict, as GPT-2's ``bpe`` cache does."""

    def __init__(self, vocab_file: str, merge_file: str) -> None:
        import regex

        from megadata_adapters.tokenizing.byte_level_bpe import bytes_to_unicode

        with open(vocab_file, encoding="utf-8") as stream:
            self.vocab = json.load(stream)
        with open(merge_file, encoding="utf-8") as stream:
            lines = stream.read().split("\n")[1:-1]
        self.priority = {tuple(line.split()): k for k, line in enumerate(lines)}
        self.byte_char = bytes_to_unicode()
        self.pattern = regex.compile(
            r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
        self.memo: dict[str, list[str]] = {}

    def merge(self, piece: str) -> list[str]:
        if piece in self.memo:
            return self.memo[piece]
        symbols = list(piece)
        while len(symbols) > 1:
            ranked = [(self.priority.get(pair, len(self.priority)), pair)
                      for pair in zip(symbols, symbols[1:])]
            rank, best = min(ranked, key=lambda item: item[0])
            if rank == len(self.priority):
                break
            joined, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    joined.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    joined.append(symbols[i])
                    i += 1
            symbols = joined
        self.memo[piece] = symbols
        return symbols

    def encode(self, text: str) -> list[int]:
        ids = []
        for piece in self.pattern.findall(text):
            mapped = "".join(self.byte_char[b] for b in piece.encode("utf-8"))
            ids.extend(self.vocab.get(token, 0) for token in self.merge(mapped))
        return ids


def peer_encoder(kind: str, options: dict, peer: str):
    """(encode(text) -> list of ids, eod) of a peer: ``megatron`` (the encoder Megatron-LM
    calls for ``kind``) or ``rust`` (the ``tokenizers`` encoder, one text per call)."""
    from megadata_adapters.tokenizing.text_tokenizers import load_tokenizer

    tokenizer = load_tokenizer(kind, **options)
    if peer == "rust":
        rust = tokenizer._tokenizer
        return (lambda text: rust.encode(text, add_special_tokens=False).ids), tokenizer.eod_id
    if kind == "GPT2BPETokenizer":
        return MegatronStyleGPT2BPE(**options).encode, tokenizer.eod_id
    from transformers import AutoTokenizer  # Megatron's default: use_fast=False, .tokenize

    hf = AutoTokenizer.from_pretrained(options["tokenizer_model"], use_fast=False)
    return (lambda text: hf.convert_tokens_to_ids(hf.tokenize(text))), tokenizer.eod_id


def _peer_init(kind: str, options: dict, peer: str) -> None:
    global _PEER
    _PEER = peer_encoder(kind, options, peer)


def _peer_encode(line: str):
    encode, eod = _PEER
    ids = list(encode(json.loads(line)["text"]))
    if ids:
        ids.append(eod)
    return ids, len(line)


def peer_preprocess(megatron, kind, options, peer, jsonl, prefix, workers, dtype) -> int:
    """Megatron-LM's loop: one encode per document in a pool, add_document per document."""
    builder = megatron.IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
    documents = 0
    with open(jsonl, encoding="utf-8") as lines, multiprocessing.Pool(
        workers, initializer=_peer_init, initargs=(kind, options, peer)
    ) as pool:
        for ids, _ in pool.imap(_peer_encode, lines, chunksize=32):
            builder.add_document(ids, [len(ids)] if ids else [])
            documents += 1
    builder.finalize(prefix + ".idx")
    return documents


def ours_preprocess(kind, options, jsonl, prefix, workers):
    from megadata_adapters.tokenizing.text_tokenizers import load_tokenizer
    from megadata_core.preprocess import preprocess_jsonl

    factory = functools.partial(load_tokenizer, kind, **options)
    summary = preprocess_jsonl([jsonl], prefix, factory, append_eod=True, workers=workers)
    written = summary.output_prefixes["text"]
    for suffix in (".bin", ".idx"):
        os.replace(written + suffix, prefix + suffix)
    return summary.tokens


PEERS = {
    "megatron": "Megatron-LM's method and encoder",
    "rust": "Megatron-LM's method, tokenizers' Rust encoder",
}


def _available_peers(kind: str) -> tuple[list[str], list[str]]:
    """(peers that can run, notes on those that cannot)."""
    if kind != "HuggingFaceTokenizer":
        return list(PEERS), []
    try:
        import transformers  # noqa: F401
    except ImportError:
        return ["rust"], [f"{kind}: transformers is not installed, so the megatron peer is n/a"]
    return list(PEERS), []


def bench_tokenizer(bench, megatron, kind, options, jsonl, documents, nbytes, repeats) -> None:
    """Rows (docs/s, MB/s, tokens/s) for one tokenizer type: ours beside each peer."""
    from megadata_adapters.tokenizing.text_tokenizers import load_tokenizer
    from megadata_core.format import optimal_dtype

    tokenizer = load_tokenizer(kind, **options)
    dtype = np.dtype(optimal_dtype(tokenizer.vocab_size)).type
    peers, notes = _available_peers(kind) if megatron is not None else ([], [])
    for note in notes:
        bench.note(note)
    seconds = {side: [] for side in ["ours", *peers]}
    tokens, identical = 0, dict.fromkeys(peers)
    for repeat in range(repeats):
        sides = ["ours", *peers] if repeat % 2 == 0 else [*peers, "ours"]
        prefixes = {side: bench.path(kind, side) for side in sides}
        for side in sides:
            if side == "ours":
                elapsed, tokens = measure(functools.partial(
                    ours_preprocess, kind, options, jsonl, prefixes["ours"], bench.workers))
            else:
                elapsed, count = measure(functools.partial(
                    peer_preprocess, megatron, kind, options, side, jsonl, prefixes[side],
                    bench.workers, dtype))
                if count != documents:
                    raise RuntimeError(f"peer {side} preprocessed {count} of {documents} lines")
            seconds[side].append(elapsed)
        for peer in peers:
            if identical[peer] is None:
                identical[peer] = all(
                    filecmp.cmp(prefixes["ours"] + ext, prefixes[peer] + ext, shallow=False)
                    for ext in (".bin", ".idx")
                )
        for prefix in prefixes.values():
            for ext in (".bin", ".idx"):
                if os.path.exists(prefix + ext):
                    os.remove(prefix + ext)
    ours = statistics.median(seconds["ours"])
    label = f"preprocess {kind}, {documents:,} docs, {bench.workers} workers"
    bench.note(f"preprocess {kind}: ours encodes with {getattr(tokenizer, 'encoder', '?')}")
    for peer in peers or [None]:
        theirs = statistics.median(seconds[peer]) if peer else None
        versus = f" vs {PEERS[peer]}" if peer else ""
        for unit, amount in (("docs/s", documents), ("MB/s", nbytes / 1e6), ("tokens/s", tokens)):
            bench.row(f"{label}{versus}", unit, "higher", amount / ours,
                      amount / theirs if theirs else None, repeats)
        if peer:
            bench.check(f"preprocess {kind}: .bin and .idx byte-identical to {PEERS[peer]}",
                        identical[peer])


def bench_sentences(bench, jsonl: str, repeats: int) -> None:
    """MB/s of the sentence splitters over the input texts (split only, no tokenizing)."""
    from megadata_adapters.tokenizing.sentence_splitters import load_splitter

    texts = _texts(jsonl)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    for engine in ("sentencex", "nltk"):
        try:
            splitter = load_splitter("english", keep_newlines=False, engine=engine)
        except ValueError as error:
            bench.note(f"sentences: {engine} n/a ({error})")
            continue
        seconds = statistics.median(
            measure(lambda s=splitter: [s.split(t) for t in texts])[0] for _ in range(repeats)
        )
        bench.row(f"split sentences, {splitter.name}, {len(texts):,} docs", "MB/s", "higher",
                  nbytes / 1e6 / seconds, None, repeats)


def format_items(bench, megatron, make_jsonl, repeats: int) -> None:
    """The items of this module that ``bench.wants``, on one synthetic jsonl."""
    wanted = [item for item in ("preprocess-gpt2", "preprocess-hf", "sentences")
              if bench.wants(item)]
    if not wanted:
        return
    documents = bench.scaled(50_000)
    jsonl = bench.path("tokenizers", "input.jsonl")
    nbytes = make_jsonl(jsonl, documents, bench.seed + 5)
    if "sentences" in wanted:
        bench_sentences(bench, jsonl, repeats)
    kinds = {"preprocess-gpt2": "GPT2BPETokenizer", "preprocess-hf": "HuggingFaceTokenizer"}
    if any(item in kinds for item in wanted):
        files = train_tokenizer_files(jsonl, bench.path("tokenizers", "files"))
        for item in wanted:
            if item in kinds:
                bench_tokenizer(bench, megatron, kinds[item], files[kinds[item]], jsonl,
                                documents, nbytes, repeats)
    shutil.rmtree(os.path.dirname(jsonl), ignore_errors=True)
    if any(item in kinds for item in wanted):
        bench.note(
            "preprocess-gpt2/-hf peers: Megatron-LM's loop re-implemented (Pool.imap(encode, "
            "lines, chunksize=32), one encode per document, add_document per document). "
            "'megatron': with the encoder Megatron calls (GPT2BPETokenizer: GPT-2's pure-Python "
            "BPE with its per-piece cache; HuggingFaceTokenizer: transformers AutoTokenizer, "
            "use_fast=False, tokenize + convert_tokens_to_ids); 'rust': with tokenizers' Rust "
            "encoder, one document per call (a stricter peer than Megatron itself)."
        )
