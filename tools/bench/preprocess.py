"""Items of the ``format`` suite (tools/bench/format.py) for preprocessing with real tokenizers.

Usage::

    python tools/bench.py format --only preprocess-gpt2,preprocess-hf,sentences

* ``preprocess-gpt2`` / ``preprocess-hf``: documents/s, MB/s and tokens/s turning the
  same jsonl into a corpus with Megatron's ``GPT2BPETokenizer`` (vocab.json + merges.txt)
  and ``HuggingFaceTokenizer`` (a tokenizer.json directory), both trained here on the
  input (16k byte-level BPE). Ours: ``preprocess_jsonl`` (chunks through each
  library's batch encoder). The peer is Megatron-LM's method, re-implemented because
  its script is not in the megatron-core wheel: the main process reads lines into
  ``Pool.imap(encode, lines, chunksize=32)``, each worker encodes one document at a
  time and appends the EOD, the main process calls ``add_document`` per document
  (megatron-core's IndexedDatasetBuilder). The peer's encode is the same Rust
  tokenizer's single-text call, faster than what Megatron calls (its legacy GPT-2 BPE
  is pure Python; its HuggingFaceTokenizer goes through transformers' slow path), so
  the ratio understates ours. The corpora must be byte-identical.
* ``sentences``: MB/s of the sentence splitter ``--split-sentences`` uses by default
  offline (sentencex), and of NLTK punkt when a model is installed.

The items reach tools/bench.py only through the ``Bench`` object and the helpers given.
"""

from __future__ import annotations

import filecmp
import functools
import gc
import json
import multiprocessing
import os
import shutil
import statistics
import time

import numpy as np

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


def _peer_init(kind: str, options: dict) -> None:
    global _PEER
    from adapters.text_tokenizers import load_tokenizer

    tokenizer = load_tokenizer(kind, **options)
    _PEER = (tokenizer, tokenizer.eod_id)


def _peer_encode(line: str):
    tokenizer, eod = _PEER
    ids = tokenizer.encode(json.loads(line)["text"]).tolist()
    if ids:
        ids.append(eod)
    return ids, len(line)


def peer_preprocess(megatron, kind, options, jsonl, prefix, workers, dtype) -> int:
    """Megatron-LM's loop: one encode per document in a pool, add_document per document."""
    builder = megatron.IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
    documents = 0
    with open(jsonl, encoding="utf-8") as lines, multiprocessing.Pool(
        workers, initializer=_peer_init, initargs=(kind, options)
    ) as pool:
        for ids, _ in pool.imap(_peer_encode, lines, chunksize=32):
            builder.add_document(ids, [len(ids)] if ids else [])
            documents += 1
    builder.finalize(prefix + ".idx")
    return documents


def ours_preprocess(kind, options, jsonl, prefix, workers):
    from adapters.text_tokenizers import load_tokenizer
    from megadata_core.preprocess import preprocess_jsonl

    factory = functools.partial(load_tokenizer, kind, **options)
    summary = preprocess_jsonl([jsonl], prefix, factory, append_eod=True, workers=workers)
    written = summary.output_prefixes["text"]
    for suffix in (".bin", ".idx"):
        os.replace(written + suffix, prefix + suffix)
    return summary.tokens


def _timed(function):
    gc.collect()
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def bench_tokenizer(bench, megatron, kind, options, jsonl, documents, nbytes, repeats) -> None:
    """One row set (docs/s, MB/s, tokens/s) for one tokenizer type, ours beside the peer."""
    from adapters.text_tokenizers import load_tokenizer
    from megadata_core.format import optimal_dtype

    dtype = np.dtype(optimal_dtype(load_tokenizer(kind, **options).vocab_size)).type
    ours_s, theirs_s, tokens, identical = [], [], 0, None
    for repeat in range(repeats):
        prefixes = {"ours": bench.path(kind, "ours"), "theirs": bench.path(kind, "theirs")}
        for side in (["ours", "theirs"] if repeat % 2 == 0 else ["theirs", "ours"]):
            if side == "ours":
                seconds, tokens = _timed(functools.partial(
                    ours_preprocess, kind, options, jsonl, prefixes["ours"], bench.workers))
                ours_s.append(seconds)
            elif megatron is not None:
                seconds, count = _timed(functools.partial(
                    peer_preprocess, megatron, kind, options, jsonl, prefixes["theirs"],
                    bench.workers, dtype))
                if count != documents:
                    raise RuntimeError(f"peer preprocessed {count} of {documents} lines")
                theirs_s.append(seconds)
        if megatron is not None and identical is None:
            identical = all(
                filecmp.cmp(prefixes["ours"] + ext, prefixes["theirs"] + ext, shallow=False)
                for ext in (".bin", ".idx")
            )
        for prefix in prefixes.values():
            for ext in (".bin", ".idx"):
                if os.path.exists(prefix + ext):
                    os.remove(prefix + ext)
    ours = statistics.median(ours_s)
    theirs = statistics.median(theirs_s) if theirs_s else None
    label = f"preprocess {kind}, {documents:,} docs, {bench.workers} workers"
    bench.row(f"{label}", "docs/s", "higher", documents / ours,
              documents / theirs if theirs else None, repeats)
    bench.row(f"{label}", "MB/s", "higher", nbytes / 1e6 / ours,
              nbytes / 1e6 / theirs if theirs else None, repeats)
    bench.row(f"{label}", "tokens/s", "higher", tokens / ours,
              tokens / theirs if theirs else None, repeats)
    bench.check(f"preprocess {kind}: .bin and .idx byte-identical to the peer's", identical)


def bench_sentences(bench, jsonl: str, repeats: int) -> None:
    """MB/s of the sentence splitters over the input texts (split only, no tokenizing)."""
    from adapters.sentence_splitters import load_splitter

    texts = _texts(jsonl)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    for engine in ("sentencex", "nltk"):
        try:
            splitter = load_splitter("english", keep_newlines=False, engine=engine)
        except ValueError as error:
            bench.note(f"sentences: {engine} n/a ({error})")
            continue
        seconds = statistics.median(
            _timed(lambda s=splitter: [s.split(t) for t in texts])[0] for _ in range(repeats)
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
            "preprocess-gpt2/-hf peer: Megatron-LM's loop re-implemented (Pool.imap(encode, "
            "lines, chunksize=32), one encode per document, add_document per document) with "
            "the same Rust tokenizer per document; Megatron's own GPT2BPE (pure Python) and "
            "HuggingFaceTokenizer (transformers, use_fast=False) encode slower than that."
        )
