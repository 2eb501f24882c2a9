"""The megadata demo: real text -> .bin/.idx -> blended GPT index -> Grain -> JAX mesh.

    megadata-demo [--workdir demo_output] [--max_documents 2000] [--workers 2]

Builds two JSON-lines corpora from the installed Python standard library (module
sources and their docstrings; no download), tokenizes them with the UTF-8 byte
tokenizer into Megatron .bin/.idx pairs, blends them 0.7/0.3 with a 98/2/0 split
(Megatron's builder semantics, indices through the on-disk cache), shows the same blend
packed best-fit with document masking (segment ids, padding fraction), streams micro-batches
through a Grain pipeline with worker processes into global arrays on an 8-device
simulated JAX mesh, prints samples, realized blend proportions and throughput, and
checkpoints the pipeline mid-way to show that a restored one continues identically.
"""

from __future__ import annotations

import dataclasses
import os
import time

# A simulated 8-device mesh on the CPU; must be set before JAX starts.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()

import numpy as np
from absl import flags

import megadata_core as mdc
from megadata_cli import progress_bars, tool_main
from megadata_cli.make_demo_corpus import build_demo_corpus
from megadata_core.preprocess import ByteTokenizer, preprocess_jsonl

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", "demo_output", "Where the corpus and its .bin/.idx go.")
flags.DEFINE_integer("max_documents", 2000, "Standard-library modules to include.",
                     lower_bound=1)
flags.DEFINE_integer("workers", 2, "Tokenizer processes.", lower_bound=1)
flags.DEFINE_integer("show", 3, "Documents to print.", lower_bound=0)
flags.DEFINE_integer("sequence_length", 1024, "Tokens per GPT sample.", lower_bound=1)
flags.DEFINE_integer("batch_size", 32, "Samples per batch in the throughput figure.",
                     lower_bound=1)
flags.DEFINE_integer("batches", 200, "Batches read for the throughput figure.", lower_bound=2)
flags.DEFINE_integer("train_samples", 20_000, "Samples of the blended train split.",
                     lower_bound=1)
flags.DEFINE_integer("grain_workers", 2, "Grain worker processes.", lower_bound=0)
flags.DEFINE_integer("valid_samples", 500, "Samples of the blended valid split.",
                     lower_bound=0)
flags.DEFINE_bool(
    "progress", True, "Progress bars for tokenizing and the first index build (on a "
    "terminal only; --noprogress: never)."
)


def _decode(tokens: np.ndarray, eod_id: int) -> str:
    return bytes(tokens[tokens != eod_id].astype(np.uint8)).decode("utf-8", errors="replace")


def _tokenize(name: str, kind: str) -> str:
    """Build one stdlib corpus (module sources or their docstrings) and tokenize it; each
    phase is timed on its own (reading and parsing the standard library is not tokenizing)."""
    jsonl = os.path.join(FLAGS.workdir, f"{name}.jsonl")
    start = time.perf_counter()
    documents = build_demo_corpus(jsonl, max_documents=FLAGS.max_documents, kind=kind)
    built = time.perf_counter() - start
    size_mb = os.path.getsize(jsonl) / 1e6
    start = time.perf_counter()
    with progress_bars.bar(
        FLAGS.progress, total=documents, unit=" docs", desc=f"tokenizing {name}", leave=False
    ) as bar:
        summary = preprocess_jsonl(
            [jsonl],
            os.path.join(FLAGS.workdir, name),
            ByteTokenizer,
            append_eod=True,
            workers=FLAGS.workers,
            progress=lambda count, _: bar.update(count - bar.n),
        )
    tokenized = time.perf_counter() - start
    prefix = summary.output_prefixes["text"]
    print(
        f"      {name}: {documents} documents of standard-library {kind}, {size_mb:.1f} MB of "
        f"JSON lines, written in {built:.2f} s"
    )
    print(
        f"      {'':{len(name)}}  tokenized in {tokenized:.2f} s "
        f"({summary.bytes / 1e6 / tokenized:.1f} MB/s, {FLAGS.workers} workers) -> "
        f"{summary.tokens:,} tokens in {prefix}.bin/.idx"
    )
    return prefix


def _runs(values: np.ndarray) -> str:
    """``value x count`` for each run of equal values, e.g. ``1x734 2x289 0x1``."""
    starts = np.flatnonzero(np.diff(values, prepend=values[0] - 1))
    counts = np.diff(np.append(starts, len(values)))
    return " ".join(f"{int(values[a])}x{int(n)}" for a, n in zip(starts, counts))


def _show_packing(config: mdc.GPTDataConfig, samples: int, eod: int) -> None:
    """The same blend packed best-fit with document masking: one batch's segment ids and
    the padding fraction, beside Megatron's concatenated windows (no padding, documents
    cut at every window edge)."""
    packed_config = dataclasses.replace(
        config, packing="best_fit", document_masking=True, pad_id=0
    )
    train = mdc.build_datasets(packed_config, [samples, 0, 0])[0]
    batch = train.__getitems__(np.arange(min(len(train), 1024)))
    padding = float((batch["segment_ids"] == 0).mean())
    print(
        f"      packed best_fit + document_masking: {len(train):,} samples; padding "
        f"{100 * padding:.2f}% of tokens (concat: 0%, but a document is cut wherever a "
        f"window edge falls); keys {sorted(batch)}"
    )
    row = batch["segment_ids"][0]
    print(
        f"      sample 0: {int(row.max())} documents, segment_ids (value x run) "
        f"{_runs(row)[:90]}; cu_seqlens {batch['cu_seqlens'][0][: int(row.max()) + 2].tolist()}"
        f"...; max_seqlen {int(batch['max_seqlen'][0])}"
    )


def _config() -> mdc.GPTDataConfig:
    """The demo's blend of the two corpora it writes (made before anything is written,
    so a bad flag stops the demo first)."""
    sources, docstrings = (os.path.join(FLAGS.workdir, f"{name}_text_document")
                           for name in ("stdlib", "stdlib_docs"))
    return mdc.GPTDataConfig(
        random_seed=1234,
        sequence_length=FLAGS.sequence_length,
        blend=f"0.7 {sources} 0.3 {docstrings}",
        split="98,2,0",
        path_to_cache=os.path.join(FLAGS.workdir, "index_cache"),
        eod_id=ByteTokenizer.eod_id,
        create_attention_mask=False,
    )


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        tool_main.fail(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        config = _config()
        if os.path.exists(FLAGS.workdir) and not os.path.isdir(FLAGS.workdir):
            raise mdc.DataError(f"--workdir: {FLAGS.workdir} is not a directory")
    except mdc.DataError as error:
        tool_main.fail(str(error))
    started = time.perf_counter()
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
    cached = bool(os.path.isdir(config.path_to_cache) and os.listdir(config.path_to_cache))
    start = time.perf_counter()
    with progress_bars.bar(
        FLAGS.progress and not cached, total=4, unit="dataset", desc="building indices",
        leave=False,
    ) as bar:  # two corpora x two splits
        train, valid, _ = mdc.build_datasets(
            config, [FLAGS.train_samples, FLAGS.valid_samples, None], progress=bar.update
        )
    elapsed = time.perf_counter() - start
    counts = np.bincount(np.asarray(train.dataset_index), minlength=2) / len(train)
    print(
        f"[3/4] blended train split: {len(train):,} samples of {FLAGS.sequence_length} tokens, "
        f"weights 0.7/0.3 requested, {counts[0]:.4f}/{counts[1]:.4f} realized; valid "
        f"{len(valid):,} samples; indices {'loaded from' if cached else 'built into'} "
        f"{config.path_to_cache} in {elapsed:.3f} s"
    )
    sample = train[0]
    text = _decode(sample["tokens"], eod)
    print(
        f"      sample 0 (from dataset {int(sample['dataset_id'])}): keys {sorted(sample)} | "
        f"{' '.join(text.split())[:100]}..."
    )

    _show_packing(config, FLAGS.train_samples, eod)

    import jax

    from megadata_adapters.frameworks import grain_source, jax_sharding

    mesh = jax_sharding.data_mesh(("data",))
    pipeline = grain_source.batched_dataset(
        train, micro_batch_size=FLAGS.batch_size, worker_count=FLAGS.grain_workers
    )
    start = time.perf_counter()
    batches = iter(pipeline)
    first = next(batches)  # starts the worker processes
    startup = time.perf_counter() - start
    half = FLAGS.batches // 2
    start = time.perf_counter()
    tokens = 0
    counts = np.zeros(2, dtype=np.int64)
    for _ in range(half):
        arrays = jax_sharding.global_batch(next(batches), mesh)
        tokens += arrays["tokens"].size
        counts += np.bincount(np.asarray(arrays["dataset_id"]), minlength=2)
    elapsed = time.perf_counter() - start
    state = batches.get_state()
    after = [next(batches)["tokens"] for _ in range(3)]
    print(
        f"[4/4] Grain ({FLAGS.grain_workers} workers, one core read per micro-batch) -> "
        f"{jax.device_count()}-device mesh: first batch after {startup:.2f} s (starting the "
        f"workers); then {half} batches in {elapsed:.2f} s: {tokens / elapsed / 1e6:,.1f} M "
        f"tokens/s ({half * FLAGS.batch_size / elapsed:,.0f} samples/s); tokens "
        f"{arrays['tokens'].shape} {arrays['tokens'].dtype} sharded "
        f"{arrays['tokens'].sharding.spec}"
    )
    share = counts / counts.sum()
    print(f"      realized blend in the batches read: {share[0]:.3f}/{share[1]:.3f} (0.7/0.3)")
    print(f"      first batch, sample 0: {' '.join(_decode(first['tokens'][0], eod).split())[:90]}")
    start = time.perf_counter()
    restored = iter(
        grain_source.batched_dataset(train, micro_batch_size=FLAGS.batch_size, worker_count=1)
    )
    restored.set_state(state)
    same = all(np.array_equal(next(restored)["tokens"], want) for want in after)
    restoring = time.perf_counter() - start
    start = time.perf_counter()
    for iterator in (batches, restored):  # stop the workers, free their shared memory
        iterator.close()
    stopping = time.perf_counter() - start
    print(
        f"      checkpoint at {state['consumed_samples']:,} consumed samples, restored with "
        f"1 worker instead of {FLAGS.grain_workers}: next 3 batches identical: {same} "
        f"(restore and 3 batches: {restoring:.2f} s; stopping the workers: {stopping:.2f} s)"
    )
    print(f"done in {time.perf_counter() - started:.1f} s; outputs in {FLAGS.workdir}/")
    command = "megadata-inspect config --config=demo_blend"
    if os.path.normpath(FLAGS.workdir) != "demo_output":  # the config names demo_output/
        command += (
            f' --data_path="0.7 {sources} 0.3 {docstrings}" --split=98,2,0 '
            f"--config.path_to_cache={config.path_to_cache}"
        )
    print(f"look at the data: {command}")
    print("  (also corpus PREFIX, samples --indices 0,1 --tokenizer_type bytes --html, and "
          "order; see \"Inspecting data\" in the README)")
    if not same:
        raise SystemExit("restored pipeline diverged")


def cli() -> None:
    """The console script: parse ``sys.argv`` and run."""
    tool_main.run(main)


if __name__ == "__main__":
    cli()
