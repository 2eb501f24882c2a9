"""The megadata demo: real text from the standard library -> .bin/.idx -> samples.

    python tools/demo.py [--workdir demo_output] [--max_documents 2000] [--workers 2]

Builds a JSON-lines corpus from the installed Python standard library (no download),
tokenizes it with the UTF-8 byte tokenizer into a Megatron .bin/.idx pair, reopens it,
prints a few documents and measures random-read throughput. The GPT sample index,
blending and the Grain/JAX pipeline join this demo as those parts land.
"""

from __future__ import annotations

import os
import time

import numpy as np
from absl import app, flags
from make_demo_corpus import build_demo_corpus

import megadata_core as mdc
from megadata_core.preprocess import ByteTokenizer, preprocess_jsonl

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", "demo_output", "Where the corpus and its .bin/.idx go.")
flags.DEFINE_integer("max_documents", 2000, "Standard-library modules to include.")
flags.DEFINE_integer("workers", 2, "Tokenizer processes.", lower_bound=1)
flags.DEFINE_integer("show", 3, "Documents to print.")
flags.DEFINE_integer("reads", 20000, "Random sequence reads for the throughput figure.")


def _decode(tokens: np.ndarray, eod_id: int) -> str:
    return bytes(tokens[tokens != eod_id].astype(np.uint8)).decode("utf-8", errors="replace")


def main(argv: list[str]) -> None:
    del argv
    os.makedirs(FLAGS.workdir, exist_ok=True)
    jsonl = os.path.join(FLAGS.workdir, "stdlib.jsonl")

    start = time.perf_counter()
    documents = build_demo_corpus(jsonl, max_documents=FLAGS.max_documents)
    size_mb = os.path.getsize(jsonl) / 1e6
    print(
        f"[1/3] corpus: {documents} documents, {size_mb:.1f} MB of standard-library source "
        f"-> {jsonl} ({time.perf_counter() - start:.2f} s)"
    )

    summary = preprocess_jsonl(
        [jsonl],
        os.path.join(FLAGS.workdir, "stdlib"),
        ByteTokenizer,
        append_eod=True,
        workers=FLAGS.workers,
    )
    prefix = summary.output_prefixes["text"]
    print(
        f"[2/3] tokenized: {summary.documents} documents, {summary.tokens:,} tokens in "
        f"{summary.seconds:.2f} s ({summary.documents_per_second:,.0f} docs/s, "
        f"{summary.megabytes_per_second:.1f} MB/s, {FLAGS.workers} workers) -> {prefix}.bin/.idx"
    )

    corpus = mdc.IndexedDataset(prefix)
    eod = ByteTokenizer.eod_id
    print(f"[3/3] {corpus}")
    for index in range(min(FLAGS.show, len(corpus))):
        text = _decode(corpus[index], eod)
        preview = " ".join(text.split())[:160]
        print(f"      doc {index}: {len(corpus[index]):,} tokens | {preview}...")

    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(corpus), size=FLAGS.reads)
    start = time.perf_counter()
    tokens_read = checksum = 0
    for index in picks:
        sequence = corpus[int(index)]
        checksum += int(sequence.sum(dtype=np.int64))  # touch every token, not just the view
        tokens_read += sequence.size
    elapsed = time.perf_counter() - start
    print(
        f"      random reads: {FLAGS.reads / elapsed:,.0f} sequences/s, "
        f"{tokens_read / elapsed / 1e6:,.1f} M tokens/s summed (mmap, hot page cache; "
        f"checksum {checksum})"
    )


if __name__ == "__main__":
    app.run(main)
