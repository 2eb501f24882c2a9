"""Suite ``format``: writer documents/s, finalize of 10M sequences, many-part merge RSS
and preprocessing documents/s, ours against megatron-core's indexed_dataset."""

from __future__ import annotations

import glob
import json
import multiprocessing
import os
import shutil
import sys

import numpy as np
from absl import flags

from bench.harness import (
    Bench,
    child_result,
    import_megatron_indexed,
    measure,
    median_of,
    progress,
    side_by_side,
    timed,
    write_raw_corpus,
)
from bench.preprocess import format_items as preprocess_tokenizer_items

FLAGS = flags.FLAGS
TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the merge child imports bench
flags.DEFINE_integer(
    "merge_parts",
    500,
    "Parts in the merge benchmark (times --scale). Megatron's add_index calls gc.collect() "
    "once per part, ~0.17-0.25 s each once megatron.core (and torch) is imported, so 2000 "
    "parts of 5000 sequences cost it ~9 minutes on 2 cores; 500 parts of 20000 sequences "
    "(the same 10M sequences) keep a full run near 4 minutes.",
)
flags.DEFINE_integer("merge_part_sequences", 20_000, "Sequences per merge part (times --scale).")
flags.DEFINE_integer("merge_repeats", 1, "Repeats of the merge (capped by --repeats).")





def _format_writer(bench: Bench, megatron) -> None:
    """Documents/s of add_document(tokens, [len]) for lognormal documents (mean ~500).

    Two inputs: uint16 numpy arrays (no conversion needed), and int64 torch tensors, the
    type Megatron's add_document documents and what torch.tensor(token_ids) gives.
    """
    import megadata_core as mdc

    rng = np.random.default_rng(bench.seed)
    count = bench.scaled(200_000)
    sigma = 1.0
    lengths = np.maximum(
        1, rng.lognormal(np.log(500) - sigma**2 / 2, sigma, size=count).astype(np.int64)
    )
    tokens = rng.integers(0, 50_000, size=int(lengths.sum()), dtype=np.uint16)
    length_lists = [[int(n)] for n in lengths]
    progress(f"writer: {count:,} documents, {tokens.size:,} tokens (mean {lengths.mean():.0f})")
    inputs = [("numpy uint16", lambda: np.split(tokens, np.cumsum(lengths)[:-1]))]
    try:
        import torch

        def tensors():
            wide = torch.from_numpy(tokens.astype(np.int64))
            return list(torch.split(wide, lengths.tolist()))

        inputs.append(("torch int64", tensors))
    except ImportError:
        bench.note("writer: torch is not installed, so the torch-tensor input row is skipped.")

    for label, make_documents in inputs:
        documents = make_documents()

        def add_all(target, documents=documents):
            for document, sizes in zip(documents, length_lists):
                target.add_document(document, sizes)

        def ours(prefix, add_all=add_all):
            writer = mdc.IndexedDatasetWriter(prefix, np.uint16)
            seconds = timed(lambda: add_all(writer))
            writer.finalize()
            return seconds

        def theirs(prefix, add_all=add_all):
            builder = megatron.IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
            seconds = timed(lambda: add_all(builder))
            builder.finalize(prefix + ".idx")
            return seconds

        ours_s, theirs_s, identical = side_by_side(
            bench, "writer", bench.repeats, ours, theirs if megatron else None
        )
        bench.row(
            f"writer add_document, {count:,} docs, {label} input",
            "docs/s",
            "higher",
            count / median_of(ours_s),
            count / median_of(theirs_s) if theirs_s else None,
            bench.repeats,
        )
        bench.check(f"writer ({label} input): .bin and .idx byte-identical", identical)
        del documents


def _format_finalize(bench: Bench, megatron) -> None:
    """Seconds of finalize() after 10M tiny sequences (1 to 3 tokens each)."""
    import megadata_core as mdc

    rng = np.random.default_rng(bench.seed + 1)
    per_document = 10_000
    sequences = bench.scaled(10_000_000, minimum=per_document)
    documents = max(1, sequences // per_document)
    sequences = documents * per_document
    lengths = rng.integers(1, 4, size=sequences).reshape(documents, per_document)
    document_tokens = [np.zeros(int(row.sum()), dtype=np.uint16) for row in lengths]
    length_lists = [row.tolist() for row in lengths]  # Megatron documents lengths: List[int]
    progress(f"finalize: {sequences:,} sequences in {documents:,} documents")

    def ours(prefix):
        writer = mdc.IndexedDatasetWriter(prefix, np.uint16)
        for tokens, row in zip(document_tokens, lengths):
            writer.add_document(tokens, row)
        return timed(writer.finalize)

    def theirs(prefix):
        builder = megatron.IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
        for tokens, row in zip(document_tokens, length_lists):
            builder.add_document(tokens, row)
        return timed(lambda: builder.finalize(prefix + ".idx"))

    ours_s, theirs_s, identical = side_by_side(
        bench, "finalize", bench.repeats, ours, theirs if megatron else None
    )
    bench.row(
        f"finalize, {sequences / 1e6:g}M sequences",
        "s",
        "lower",
        median_of(ours_s),
        median_of(theirs_s),
        bench.repeats,
    )
    bench.check("finalize: .bin and .idx byte-identical", identical)
    bench.note(
        "finalize goal: ours/megatron <= 0.20. Ours includes an fsync of the .idx; "
        "Megatron's does not fsync."
    )


# Runs in a fresh interpreter so that its peak RSS is the merge's alone.
_MERGE_CHILD = r"""
import json, os, sys, time, warnings
import numpy as np

sys.path.insert(0, os.environ["MEGADATA_TOOLS"])
from bench.peers import proc_status as status

side, out_prefix, list_path = sys.argv[1:4]
with open(list_path) as stream:
    prefixes = stream.read().split("\n")
if side == "ours":
    from megadata_core import merge_datasets
    def run():
        merge_datasets(prefixes, out_prefix)
else:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
    def run():
        builder = IndexedDatasetBuilder(out_prefix + ".bin", dtype=np.uint16)
        for prefix in prefixes:
            builder.add_index(prefix)
        builder.finalize(out_prefix + ".idx")
baseline = status("VmRSS")
start = time.perf_counter()
run()
seconds = time.perf_counter() - start
# VmHWM belongs to this process image alone; ru_maxrss can carry the parent's peak
# across fork/exec on Linux.
print("RESULT " + json.dumps({"seconds": seconds, "peak": status("VmHWM"), "baseline": baseline}))
"""


def _merge_in_child(side: str, out_prefix: str, list_path: str) -> dict:
    return child_result(
        [sys.executable, "-c", _MERGE_CHILD, side, out_prefix, list_path],
        f"merge child ({side})",
        env={"MEGADATA_TOOLS": TOOLS},
    )


def _format_merge(bench: Bench, megatron, repeats: int) -> None:
    """Peak RSS and seconds of merging many parts of one-sequence documents."""
    rng = np.random.default_rng(bench.seed + 2)
    parts = bench.scaled(FLAGS.merge_parts, minimum=2)
    per_part = bench.scaled(FLAGS.merge_part_sequences)
    lengths = rng.integers(1, 17, size=parts * per_part).astype(np.int32)
    tokens = rng.integers(0, 50_000, size=int(lengths.sum()), dtype=np.uint16)
    ends = np.cumsum(lengths.astype(np.int64))
    boundaries = np.arange(per_part + 1, dtype=np.int64)  # one sequence per document
    progress(f"merge: writing {parts:,} parts x {per_part:,} sequences ({tokens.nbytes:,} bytes)")
    prefixes = []
    for part in range(parts):
        first, last = part * per_part, (part + 1) * per_part
        token_start = int(ends[first - 1]) if first else 0
        prefix = bench.path("merge", "parts", f"part_{part:05d}")
        write_raw_corpus(
            prefix, tokens[token_start : int(ends[last - 1])], lengths[first:last], boundaries
        )
        prefixes.append(prefix)
    del tokens, lengths, ends
    list_path = bench.path("merge", "parts.txt")
    with open(list_path, "w") as stream:
        stream.write("\n".join(prefixes))

    results = {}
    results["ours"], results["theirs"], identical = side_by_side(
        bench,
        "merge",
        repeats,
        lambda prefix: _merge_in_child("ours", prefix, list_path),
        (lambda prefix: _merge_in_child("theirs", prefix, list_path)) if megatron else None,
    )

    def stat(side, transform):
        return median_of([transform(result) for result in results[side]])

    mib = 1024 * 1024
    label = f"merge {parts:,} parts x {per_part:,} seqs"
    bench.row(
        f"{label}: peak RSS",
        "MiB",
        "lower",
        stat("ours", lambda r: r["peak"] / mib),
        stat("theirs", lambda r: r["peak"] / mib),
        repeats,
    )
    bench.row(
        f"{label}: peak RSS above imports",
        "MiB",
        "lower",
        stat("ours", lambda r: (r["peak"] - r["baseline"]) / mib),
        stat("theirs", lambda r: (r["peak"] - r["baseline"]) / mib),
        repeats,
    )
    bench.row(
        f"{label}: time",
        "s",
        "lower",
        stat("ours", lambda r: r["seconds"]),
        stat("theirs", lambda r: r["seconds"]),
        repeats,
    )
    bench.check("merge: .bin and .idx byte-identical", identical)
    bench.note(
        "merge runs each side in a fresh interpreter; peak RSS is VmHWM of that "
        "interpreter (it includes imports: megatron-core pulls in torch)."
    )
    shutil.rmtree(os.path.dirname(list_path), ignore_errors=True)


# -- preprocessing: Megatron's approach, re-implemented from its documented design ----------
#
# tools/preprocess_data.py of Megatron-LM reads the jsonl in the main process, hands lines
# to a multiprocessing.Pool through imap(encode, lines, chunksize=32); each worker parses
# the JSON, tokenizes the text into a list of ids and appends the end-of-document id; the
# main process adds every document to an IndexedDatasetBuilder and finalizes it.

BYTE_EOD = 256


def _peer_encode(line: str):
    text = json.loads(line)["text"]
    ids = list(text.encode("utf-8"))
    if ids:
        ids.append(BYTE_EOD)
    return ids, len(line)


def peer_preprocess(megatron, jsonl: str, output_prefix: str, workers: int) -> int:
    builder = megatron.IndexedDatasetBuilder(output_prefix + ".bin", dtype=np.uint16)
    documents = 0
    with open(jsonl, encoding="utf-8") as lines, multiprocessing.Pool(workers) as pool:
        for ids, _ in pool.imap(_peer_encode, lines, chunksize=32):
            builder.add_document(ids, [len(ids)] if ids else [])
            documents += 1
    builder.finalize(output_prefix + ".idx")
    return documents


def ours_preprocess(jsonl: str, output_prefix: str, workers: int) -> str:
    """Run megadata_core.preprocess; returns the prefix of the corpus it wrote."""
    from megadata_core import preprocess

    preprocess.preprocess_jsonl(
        [jsonl],
        output_prefix,
        json_keys=["text"],
        tokenizer_factory=preprocess.ByteTokenizer,
        append_eod=True,
        workers=workers,
    )
    written = sorted(glob.glob(glob.escape(output_prefix) + "*.idx"))
    if len(written) != 1:
        raise RuntimeError(f"preprocess_jsonl wrote {written}, expected one .idx")
    return written[0][: -len(".idx")]


_WORDS_UNICODE = [
    "café",
    "naïve",
    "über",
    "façade",
    "Zürich",
    "東京",
    "Привет",
    "ελληνικά",
    "señor",
    "😀",
    "résumé",
    "coöperate",
]


def make_jsonl(path: str, documents: int, seed: int) -> int:
    """English-like documents (Zipf words, sentences, paragraphs); returns the bytes written."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    frequency = np.array(
        [
            12.7,
            9.1,
            8.2,
            7.5,
            7.0,
            6.7,
            6.3,
            6.1,
            6.0,
            4.3,
            4.0,
            2.8,
            2.8,
            2.4,
            2.4,
            2.2,
            2.0,
            2.0,
            1.9,
            1.5,
            1.0,
            0.8,
            0.2,
            0.2,
            0.1,
            0.1,
        ]
    )
    frequency /= frequency.sum()
    vocabulary = [
        "".join(rng.choice(letters, size=n, p=frequency))
        for n in np.clip(rng.poisson(4.5, size=5000), 1, 14)
    ]
    vocabulary = ["the", "of", "and", "to", "a", "in", "is", "that"] + vocabulary + _WORDS_UNICODE
    weights = 1.0 / np.arange(1, len(vocabulary) + 1)
    weights /= weights.sum()
    sentences = []
    for _ in range(20_000):
        words = [
            vocabulary[i] for i in rng.choice(len(vocabulary), size=rng.integers(4, 26), p=weights)
        ]
        if len(words) > 8 and rng.random() < 0.4:
            words[len(words) // 2] += ","
        sentences.append(
            words[0].capitalize()
            + " "
            + " ".join(words[1:])
            + [". ", ". ", ". ", "? ", "! "][rng.integers(0, 5)]
        )
    counts = np.maximum(1, rng.lognormal(np.log(8) - 0.32, 0.8, size=documents).astype(int))
    picks = rng.integers(0, len(sentences), size=int(counts.sum()))
    breaks = rng.random(size=picks.size) < 0.15
    written = 0
    with open(path, "w", encoding="utf-8") as stream:
        position = 0
        for number, count in enumerate(counts):
            parts = []
            for k in range(position, position + count):
                parts.append(sentences[picks[k]])
                if breaks[k]:
                    parts.append("\n\n")
            position += count
            line = json.dumps({"id": number, "text": "".join(parts).strip()}, ensure_ascii=False)
            written += stream.write(line + "\n")
    return written


def _format_preprocess(bench: Bench, megatron, repeats: int) -> None:
    """Documents/s turning the same jsonl into a corpus: same byte tokenizer, same workers."""
    documents = bench.scaled(100_000)
    jsonl = bench.path("preprocess", "input.jsonl")
    size = make_jsonl(jsonl, documents, bench.seed + 3)
    progress(
        f"preprocess: {documents:,} documents, {size / 1e6:.1f} MB of jsonl, "
        f"{bench.workers} workers"
    )
    try:
        from megadata_core import preprocess

        have_ours = hasattr(preprocess, "preprocess_jsonl") and hasattr(preprocess, "ByteTokenizer")
        why = "" if have_ours else "lacks preprocess_jsonl or ByteTokenizer"
    except ImportError as error:
        have_ours, why = False, f"cannot be imported ({error})"
    if not have_ours:
        bench.note(f"preprocess: megadata_core.preprocess {why}; ours is n/a.")

    def ours(prefix):
        seconds, written = measure(lambda: ours_preprocess(jsonl, prefix + ".out", bench.workers))
        for suffix in (".bin", ".idx"):  # to the name side_by_side compares
            os.replace(written + suffix, prefix + suffix)
        return seconds

    def theirs(prefix):
        seconds, count = measure(lambda: peer_preprocess(megatron, jsonl, prefix, bench.workers))
        if count != documents:
            raise RuntimeError(f"peer preprocessed {count} of {documents} lines")
        return seconds

    ours_s, theirs_s, identical = side_by_side(
        bench,
        "preprocess",
        repeats,
        ours if have_ours else None,
        theirs if megatron is not None else None,
    )
    bench.row(
        f"preprocess jsonl, {documents:,} docs, {bench.workers} workers",
        "docs/s",
        "higher",
        documents / median_of(ours_s) if ours_s else None,
        documents / median_of(theirs_s) if theirs_s else None,
        repeats,
    )
    bench.check("preprocess: .bin and .idx byte-identical", identical)
    bench.note(
        "preprocess peer: Megatron's design re-implemented here (Pool.imap(encode, "
        "lines, chunksize=32), builder.add_document(list_of_ids, [len]) in the main "
        "process); byte tokenizer = UTF-8 bytes + eod 256, uint16."
    )


def suite_format(bench: Bench) -> None:
    """The .bin/.idx format: writer throughput, finalize, merge memory, preprocessing."""
    megatron = import_megatron_indexed()
    if megatron is None:
        bench.note("megatron-core is not installed: its column is n/a.")
    merge_repeats = min(bench.repeats, FLAGS.merge_repeats)
    preprocess_repeats = min(bench.repeats, 3)
    if bench.wants("merge") and merge_repeats < bench.repeats:
        bench.note(
            f"merge runs {merge_repeats} time(s), not {bench.repeats}, to keep a full "
            "run near 5 minutes (--merge_repeats); Megatron's merge time is mostly "
            "gc.collect() per part."
        )
    if bench.wants("preprocess") and preprocess_repeats < bench.repeats:
        bench.note(
            f"preprocess runs {preprocess_repeats} times, not {bench.repeats}, to keep "
            "a full run near 5 minutes."
        )
    if bench.wants("writer"):
        _format_writer(bench, megatron)
    if bench.wants("finalize"):
        _format_finalize(bench, megatron)
    if bench.wants("merge"):
        _format_merge(bench, megatron, merge_repeats)
    if bench.wants("preprocess"):
        _format_preprocess(bench, megatron, preprocess_repeats)
    # preprocess-gpt2, preprocess-hf, sentences: real tokenizers and splitters
    preprocess_tokenizer_items(bench, megatron, make_jsonl, preprocess_repeats)
