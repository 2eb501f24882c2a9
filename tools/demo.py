"""The megadata demo: real text -> .bin/.idx -> blended GPT index -> batches.

    python tools/demo.py [--workdir demo_output] [--max_documents 2000] [--workers 2]

Builds two JSON-lines corpora from the installed Python standard library (module
sources and their docstrings; no download), tokenizes them with the UTF-8 byte
tokenizer into Megatron .bin/.idx pairs, blends them 0.7/0.3 with a 98/2/0 split
(Megatron's builder semantics, indices through the on-disk cache), and reads batches
through the data-parallel sampler, printing throughput. The Grain/JAX pipeline joins
this demo with the adapters.
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
flags.DEFINE_integer("train_samples", 20_000, "Samples of the blended train split.")
flags.DEFINE_integer("valid_samples", 500, "Samples of the blended valid split.")


def _decode(tokens: np.ndarray, eod_id: int) -> str:
    return bytes(tokens[tokens != eod_id].astype(np.uint8)).decode("utf-8", errors="replace")


def _tokenize(name: str, kind: str) -> str:
    """Build one stdlib corpus (module sources or their docstrings) and tokenize it."""
    jsonl = os.path.join(FLAGS.workdir, f"{name}.jsonl")
    start = time.perf_counter()
    documents = build_demo_corpus(jsonl, max_documents=FLAGS.max_documents, kind=kind)
    size_mb = os.path.getsize(jsonl) / 1e6
    summary = preprocess_jsonl(
        [jsonl],
        os.path.join(FLAGS.workdir, name),
        ByteTokenizer,
        append_eod=True,
        workers=FLAGS.workers,
    )
    prefix = summary.output_prefixes["text"]
    print(
        f"      {name}: {documents} documents ({size_mb:.1f} MB of standard-library {kind}) "
        f"-> {summary.tokens:,} tokens in {time.perf_counter() - start:.2f} s "
        f"({summary.megabytes_per_second:.1f} MB/s tokenizing, {FLAGS.workers} workers) "
        f"-> {prefix}.bin/.idx"
    )
    return prefix


def main(argv: list[str]) -> None:
    del argv
    os.makedirs(FLAGS.workdir, exist_ok=True)
    eod = ByteTokenizer.eod_id
    print("[1/4] corpora: real text from this Python's standard library, no download")
    sources = _tokenize("stdlib", "source")
    docstrings = _tokenize("stdlib_docs", "docstrings")

    corpus = mdc.IndexedDataset(sources)
    print(f"[2/4] {corpus}")
    for index in range(min(FLAGS.show, len(corpus))):
        preview = " ".join(_decode(corpus[index], eod).split())[:120]
        print(f"      doc {index}: {len(corpus[index]):,} tokens | {preview}...")

    config = mdc.GPTDataConfig(
        random_seed=1234,
        sequence_length=FLAGS.sequence_length,
        blend=f"0.7 {sources} 0.3 {docstrings}",
        split="98,2,0",
        path_to_cache=os.path.join(FLAGS.workdir, "index_cache"),
        eod_id=eod,
        create_attention_mask=False,
    )
    start = time.perf_counter()
    train, valid, _ = mdc.build_datasets(config, [FLAGS.train_samples, FLAGS.valid_samples, None])
    counts = np.bincount(np.asarray(train.dataset_index), minlength=2) / len(train)
    print(
        f"[3/4] blended train split: {len(train):,} samples of {FLAGS.sequence_length} tokens, "
        f"weights 0.7/0.3 requested, {counts[0]:.4f}/{counts[1]:.4f} realized; valid "
        f"{len(valid):,} samples; indices built or loaded in {time.perf_counter() - start:.3f} s"
    )
    sample = train[0]
    text = _decode(sample["tokens"], eod)
    print(
        f"      sample 0 (from dataset {int(sample['dataset_id'])}): keys {sorted(sample)} | "
        f"{' '.join(text.split())[:100]}..."
    )

    sampler = mdc.samplers.PretrainingSampler(
        len(train), 0, FLAGS.batch_size, data_parallel_rank=0, data_parallel_size=1
    )
    start = time.perf_counter()
    samples = checksum = 0
    for step, indices in enumerate(sampler):
        if step == FLAGS.batches:
            break
        batch = train.__getitems__(indices)
        checksum += int(batch["tokens"][:, -1].sum())
        samples += len(indices)
    elapsed = time.perf_counter() - start
    print(
        f"[4/4] batched reads through the sampler: {samples / elapsed:,.0f} samples/s "
        f"({samples * FLAGS.sequence_length / elapsed / 1e6:,.1f} M tokens/s, "
        f"batches of {FLAGS.batch_size} x {FLAGS.sequence_length}; checksum {checksum})"
    )


if __name__ == "__main__":
    app.run(main)
