"""The ``small`` item of the ``preprocess`` suite: ours with 1 and 2 workers beside
gigatoken's whole-file path (Megatron-LM main's ``tools/preprocess_data_fast.py``) on the
inputs where fixed costs decide, 85 MB and 255 MB of real text, for each tokenizer type
users run: byte-level BPE 32k, SentencePiece BPE 16k with ``identity`` normalization,
and SentencePiece BPE 16k with ``nmt_nfkc`` (sentencepiece's default: character map,
extra whitespace removed, dummy prefix).

    python tools/bench.py preprocess --only small --repeats 3
    python tools/bench.py preprocess --only small --repeats 3 --small_sizes 255M \
        --small_tokenizers bpe,nmt_nfkc     # some rows only

Each side runs in a fresh interpreter (``preprocess_child.py``), its libraries imported
before the clock and its tokenizer loaded on it; ours from a proof cache holding the
tokenizer's verdict (every run after a tokenizer's first). Checks: ours 2 workers' corpus
equals ours 1 worker's; gigatoken's equals ours for byte-level BPE; for SentencePiece ours
equals sentencepiece's own (``--encoder reference``, run once) and a note counts the
documents where gigatoken's own SentencePiece loader gives other ids.
"""

from __future__ import annotations

import os
import shutil
import statistics

from absl import flags

from bench.harness import progress, same_files
from bench.preprocess_peers import (
    differing_documents,
    real_text_jsonl,
    remove_corpus_files,
    run_side,
    train_tokenizers,
    training_texts,
)

FLAGS = flags.FLAGS
TOKENIZERS = {"bpe": "byte-level BPE 32k", "identity": "SentencePiece BPE 16k identity",
              "nmt_nfkc": "SentencePiece BPE 16k nmt_nfkc"}
flags.DEFINE_list("small_sizes", ["85M", "255M"], "preprocess suite, item small: the input "
                  "sizes (85M, 255M, ...; times --scale).")
flags.DEFINE_list("small_tokenizers", list(TOKENIZERS), "preprocess suite, item small: the "
                  f"tokenizers ({', '.join(TOKENIZERS)}).")
SIDES = (("ours 1 worker", "ours", 1), ("gigatoken", "gigatoken", 1),  # ours first: the
         ("ours 2 workers", "ours", 2))  # others' corpora are compared with its


def train_nmt_nfkc(jsonl: str, directory: str, train_bytes: int) -> tuple[str, dict]:
    """A SentencePiece BPE 16k model with byte fallback and sentencepiece's default
    normalization (``nmt_nfkc``, extra whitespace removed, dummy prefix)."""
    import sentencepiece

    texts = training_texts(jsonl, train_bytes)
    model = os.path.join(directory, "sp-nmt_nfkc")
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts[:3000]), model_prefix=model, vocab_size=16_000,
        model_type="bpe", byte_fallback=True, hard_vocab_limit=False,
        max_sentence_length=1 << 20, input_sentence_size=200_000, num_threads=2,
        minloglevel=2)
    return "SentencePieceTokenizer", {"tokenizer_model": model + ".model"}


def bench_small(bench) -> None:
    try:
        import gigatoken  # noqa: F401
        import sentencepiece  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError as error:
        bench.note(f"small: {error.name} is not installed: n/a")
        return
    sizes, chosen = selected()
    work = os.path.dirname(bench.path("small", "x"))
    largest = bench.path("small", "train.jsonl")
    real_text_jsonl(largest, bench.scaled(max(sizes), 200_000))
    directory = os.path.join(work, "tok")
    os.makedirs(directory, exist_ok=True)
    train_bytes = bench.scaled(8_000_000, 100_000)
    trained = train_tokenizers(largest, directory, train_bytes)
    tokenizers_ = {"byte-level BPE 32k": trained["byte-level BPE 32k"],
                   "SentencePiece BPE 16k identity": trained["SentencePiece BPE 16k"]}
    if TOKENIZERS["nmt_nfkc"] in chosen:
        tokenizers_[TOKENIZERS["nmt_nfkc"]] = train_nmt_nfkc(largest, directory, train_bytes)
    tokenizers_ = {label: tokenizers_[label] for label in chosen}
    for size in sizes:
        source = bench.path("small", f"input-{size}.jsonl")
        documents, nbytes = real_text_jsonl(source, bench.scaled(size, 100_000))
        bench.note(f"small: {nbytes / 1e6:.1f} MB of real text, {documents:,} documents "
                   "(this installation's text files, as in peers)")
        for number, (label, (kind, options)) in enumerate(tokenizers_.items()):
            _bench_one(bench, f"small {nbytes / 1e6:.0f} MB, {label}", kind, options,
                       source, nbytes, os.path.join(work, f"proofs-{number}"))
        os.remove(source)
    shutil.rmtree(work, ignore_errors=True)


def selected() -> tuple[list[int], list[str]]:
    """(the input sizes, the tokenizers' labels) that ``--small_sizes`` and
    ``--small_tokenizers`` name; ValueError for a name or size it does not know."""
    sizes = []
    for text in FLAGS.small_sizes:
        number = text.strip().upper().rstrip("B")
        scale = {"K": 10**3, "M": 10**6, "G": 10**9}.get(number[-1:], 1)
        try:
            sizes.append(int(float(number[:-1] if scale > 1 else number) * scale))
        except ValueError:
            raise ValueError(f"--small_sizes: {text!r} is not a size (e.g. 255M)") from None
    unknown = [name for name in FLAGS.small_tokenizers if name not in TOKENIZERS]
    if unknown or not sizes or not FLAGS.small_tokenizers:
        raise ValueError(f"--small_tokenizers: {unknown or 'none'} (known: "
                         f"{', '.join(TOKENIZERS)}); --small_sizes: {FLAGS.small_sizes}")
    return sizes, [TOKENIZERS[name] for name in TOKENIZERS if name in FLAGS.small_tokenizers]


def _bench_one(bench, label: str, kind: str, options: dict, source: str, nbytes: int,
               cache: str) -> None:
    run_side("prime", kind, options, source, "", 1, cache)
    results: dict[str, list[dict]] = {}
    ours = bench.path("small", "ours-1-worker")
    for repeat in range(bench.repeats):
        for name, side, workers in SIDES:
            progress(f"{label}: {name} ({repeat + 1}/{bench.repeats})")
            prefix = bench.path("small", name.replace(" ", "-"))
            results.setdefault(name, []).append(
                run_side(side, kind, options, source, prefix, workers, cache))
            if repeat == 0 and name != "ours 1 worker":
                _check(bench, label, name, prefix, ours, kind, options, source, cache)
            if name != "ours 1 worker":
                remove_corpus_files(prefix)
    megabytes = nbytes / 1e6
    giga = megabytes / statistics.median(r["seconds"] for r in results["gigatoken"])
    rates = {}
    for name in ("ours 1 worker", "ours 2 workers"):
        runs = results[name]
        rates[name] = megabytes / statistics.median(r["seconds"] for r in runs)
        bench.row(f"{label}: {name} vs gigatoken whole file", "MB/s", "higher",
                  rates[name], giga, len(runs))
    bench.row(f"{label}: ours 2 workers vs ours 1 worker", "MB/s", "higher",
              rates["ours 2 workers"], rates["ours 1 worker"], bench.repeats)
    remove_corpus_files(ours)


def _check(bench, label, name, prefix, ours, kind, options, source, cache) -> None:
    pairs = [(prefix + ext, ours + ext) for ext in (".bin", ".idx")]
    if name != "gigatoken" or "SentencePiece" not in label:
        bench.check(f"{label}: {name} corpus == ours 1 worker", same_files(*pairs))
        return
    differ = differing_documents(prefix, ours)
    bench.note(f"{label}: gigatoken's own SentencePiece loader gives other ids than "
               f"sentencepiece in {differ} documents (it splits control pieces such as '<s>' "
               "out of the text; its normalizer is not sentencepiece's)")
    reference = prefix + "-reference"
    run_side("ours", kind, {**options, "encoder": "reference"}, source, reference, 2, cache)
    bench.check(f"{label}: ours corpus == sentencepiece's own (--encoder reference)",
                same_files(*[(reference + ext, ours + ext) for ext in (".bin", ".idx")]))
    remove_corpus_files(reference)
