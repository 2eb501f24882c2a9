"""The megadata demo: real text from the standard library -> .bin/.idx -> GPT batches.

    python tools/demo.py [--workdir demo_output] [--max_documents 2000] [--workers 2]

Builds a JSON-lines corpus from the installed Python standard library (no download),
tokenizes it with the UTF-8 byte tokenizer into a Megatron .bin/.idx pair, builds the
GPT document/sample/shuffle indices (Megatron's, through the on-disk cache), prints a
sample and measures batched-read throughput. Blending and the Grain/JAX pipeline join
this demo as those parts land.
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
flags.DEFINE_integer("sequence_length", 1024, "Tokens per GPT sample.")
flags.DEFINE_integer("batch_size", 32, "Samples per batch in the throughput figure.")
flags.DEFINE_integer("batches", 200, "Batches read for the throughput figure.")


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
        f"[1/4] corpus: {documents} documents, {size_mb:.1f} MB of standard-library source "
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
        f"[2/4] tokenized: {summary.documents} documents, {summary.tokens:,} tokens in "
        f"{summary.seconds:.2f} s ({summary.documents_per_second:,.0f} docs/s, "
        f"{summary.megabytes_per_second:.1f} MB/s, {FLAGS.workers} workers) -> {prefix}.bin/.idx"
    )

    corpus = mdc.IndexedDataset(prefix)
    eod = ByteTokenizer.eod_id
    print(f"[3/4] {corpus}")
    for index in range(min(FLAGS.show, len(corpus))):
        preview = " ".join(_decode(corpus[index], eod).split())[:120]
        print(f"      doc {index}: {len(corpus[index]):,} tokens | {preview}...")

    config = mdc.GPTDataConfig(
        random_seed=1234,
        sequence_length=FLAGS.sequence_length,
        path_to_cache=os.path.join(FLAGS.workdir, "index_cache"),
        eod_id=eod,
        create_attention_mask=False,
    )
    start = time.perf_counter()
    dataset = mdc.GPTDataset(corpus, np.arange(len(corpus)), None, config, "train")
    print(f"[4/4] {dataset}: indices built or loaded in {time.perf_counter() - start:.3f} s")
    sample = dataset[0]
    text = _decode(sample["tokens"], eod)
    print(
        f"      sample 0: keys {sorted(sample)}, tokens {sample['tokens'].shape} | "
        f"{' '.join(text.split())[:100]}..."
    )

    rng = np.random.default_rng(0)
    batches = [rng.integers(0, len(dataset), FLAGS.batch_size) for _ in range(FLAGS.batches)]
    start = time.perf_counter()
    checksum = 0
    for indices in batches:
        batch = dataset.__getitems__(indices)
        checksum += int(batch["tokens"][:, -1].sum())
    elapsed = time.perf_counter() - start
    samples = FLAGS.batches * FLAGS.batch_size
    print(
        f"      batched reads: {samples / elapsed:,.0f} samples/s "
        f"({samples * FLAGS.sequence_length / elapsed / 1e6:,.1f} M tokens/s, "
        f"batches of {FLAGS.batch_size} x {FLAGS.sequence_length}; checksum {checksum})"
    )


if __name__ == "__main__":
    app.run(main)
