r"""Look at the data before training on it: a corpus, what a blend delivers, samples as
text, and which part of each corpus the first batches read.

    megadata-inspect corpus PREFIX [--eod_id 256]
    megadata-inspect corpus CACHE/raw/KEY       (raw shards tokenized into a cache)
    megadata-inspect config --config=demo_blend
    megadata-inspect samples --config=demo_blend --indices 0,1,2 \
        [--tokenizer_type bytes] [--html]
    megadata-inspect order --config=demo_blend \
        [--global_batch_size 32 --batches 64]
    megadata-inspect batch --config=demo_blend --step 212 \
        [--global_batch_size 32 | --step_batch_size_schedule "0:16 1M:32"] \
        [--micro_batch_size 2 --data_parallel_size 4 --dp_rank 1] [--html]
    megadata-inspect where --config=demo_blend --prefix PREFIX \
        --document 123 [--global_batch_size 32]

``corpus``: documents, sequences, tokens, dtype, EOD count, document length percentiles;
a PNG of the length histogram and of tokens per document along the file. Given the
directory of raw shards tokenized into a cache: its shards, the pieces and tokens made,
the shards merged (each an ordinary corpus) and, once complete, its data-args list. ``config``: the
build_index tables of every split (weights requested and realized, samples, epochs,
tokens) and, per blended split, a PNG of each dataset's share of the samples consumed so
far against its weight, for both blend orders (for a blend schedule: each stage's
requested weights against the realized shares of its samples so far). ``samples``: the
samples' text (token ids without ``--tokenizer_type``) with document boundaries,
loss-masked positions and segment ids (when the samples carry ``segment_ids``) marked;
``--html`` also writes a colour-coded page. ``order``: a PNG heatmap of the corpus
regions the first global batches read. ``batch``: every sample of training step
``--step`` (all data-parallel ranks, or ``--dp_rank``) as its segments: dataset prefix,
document id, token range inside the document, a decoded preview (``--html``: a
colour-coded page of the step's samples). ``where``: the samples, steps and ranks that
read document ``--document`` of ``--prefix``, and which of its tokens each holds.
Steps are those of Megatron's sequential sampler (``megadata_cli.inspect_provenance``).
Config-based commands take ``--config`` and Megatron's data flags as build_index does.
Files go to ``--output_dir``; each command prints the paths it wrote. Bad input exits
with status 1 and a one-line ``error:`` message.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
from absl import app, flags

from megadata_cli import data_flags, progress_bars, tool_main
from megadata_cli.split_tables import SPLITS, build_splits, built_tables, plan_splits, print_tables
from megadata_core import DataError, IndexedDataset, modes
from megadata_core.datasets import inspection
from megadata_core.preprocess import raw_directory

COMMANDS = ("corpus", "config", "samples", "order", "batch", "where")
TOKENIZER_TYPES = ["bytes", "huggingface", "tiktoken"]

FLAGS = flags.FLAGS
data_flags.define()
flags.adopt_module_key_flags(data_flags)
flags.DEFINE_string("output_dir", "inspect_output", "Where the PNG and HTML files go.")
flags.DEFINE_integer("eod_id", None, "corpus: the EOD id to count (config commands: the "
                     "config's eod_id).")
flags.DEFINE_enum("which_split", "train", list(SPLITS), "samples, order: the split to read.")
flags.DEFINE_list("indices", ["0"], "samples: sample indices of the split, comma-separated.")
flags.DEFINE_bool("html", False, "samples, batch: also write a colour-coded HTML page.")
flags.DEFINE_integer("global_batch_size", 32, "order, config, batch, where: samples per "
                     "training step.", lower_bound=1)
flags.DEFINE_integer("step", None, "batch: the training step (0-based).", lower_bound=0)
flags.DEFINE_string("step_batch_size_schedule", None, "batch, where: Megatron's "
                    "--step-batch-size-schedule ('0:768 250B:1536', thresholds in tokens); "
                    "replaces --global_batch_size.")
flags.DEFINE_integer("micro_batch_size", 1, "batch, where: samples per rank per micro "
                     "batch.", lower_bound=1)
flags.DEFINE_integer("data_parallel_size", 1, "batch, where: data-parallel ranks.",
                     lower_bound=1)
flags.DEFINE_integer("dp_rank", None, "batch: show only this data-parallel rank's samples "
                     "(default: every rank's).", lower_bound=0)
flags.DEFINE_integer("preview_tokens", 12, "batch: tokens of each segment to preview.",
                     lower_bound=0)
flags.DEFINE_string("prefix", None, "where: the dataset prefix (as the config names it).")
flags.DEFINE_integer("document", None, "where: the document id in that corpus.",
                     lower_bound=0)
flags.DEFINE_integer("batches", 64, "order: global batches to map.", lower_bound=1)
flags.DEFINE_integer("regions", 50, "order: regions each corpus is cut into.", lower_bound=1)
flags.DEFINE_string(
    "tokenizer_type", None, "samples: decode with this tokenizer (bytes, huggingface, tiktoken "
    "or a Megatron type such as GPT2BPETokenizer, as megadata-preprocess takes them); "
    "without it token ids are shown."
)
flags.DEFINE_string("tokenizer_file", None, "tokenizer.json (huggingface) or ranks file "
                    "(tiktoken).")
flags.DEFINE_string("tokenizer_model", None, "Megatron types: SentencePiece .model, "
                    "HuggingFace directory, TikTokenizer JSON.")
flags.DEFINE_string("vocab_file", None, "Megatron types: vocab.json / vocab.txt.")
flags.DEFINE_string("merge_file", None, "GPT2BPETokenizer: merges.txt.")
flags.DEFINE_integer("vocab_size", None, "NullTokenizer / TikTokenizer vocabulary size.")
flags.DEFINE_bool("progress", True, "Show progress bars (on a terminal only; --noprogress: "
                  "never).")


def _output(name: str) -> str:
    return os.path.join(FLAGS.output_dir, name)


def _stem(prefix: str) -> str:
    return os.path.basename(prefix.rstrip("/")) or "corpus"


def _wrote(paths: list[str]) -> None:
    print("wrote:")
    for path in paths:
        print(f"  {path} ({os.path.getsize(path):,} bytes)")


# -- corpus ---------------------------------------------------------------------------


def raw_corpus(directory: str) -> None:
    """The state of a directory of raw shards tokenized into a cache."""
    status = raw_directory.directory_status(directory)
    print(f"raw corpus {directory}")
    print(f"  shards     {len(status['shards']):,} ({len(status['merged']):,} merged)")
    print(f"  pieces     {status['pieces_made']:,} of {status['pieces']:,} tokenized")
    print(f"  tokens     {status['tokens_made']:,} made")
    print(f"  complete   {'yes: ' + status['data_args'] if status['complete'] else 'no'}")
    if status["error"]:
        print(f"  error      {status['error']}")
    for prefix in status["merged"][:5]:
        print(f"  corpus     {prefix}")
    if len(status["merged"]) > 5:
        print(f"  ...        and {len(status['merged']) - 5:,} more merged shards")


def corpus(prefix: str) -> None:
    from megadata_cli import inspect_plots

    if os.path.isdir(prefix) and os.path.exists(os.path.join(prefix, "plan.json")):
        raw_corpus(prefix)
        return

    indexed = IndexedDataset(prefix)
    lengths = inspection.document_lengths(indexed)
    tokens = int(lengths.sum())
    print(f"corpus {prefix}")
    print(f"  documents  {len(lengths):,}")
    print(f"  sequences  {len(indexed):,}")
    print(f"  tokens     {tokens:,}")
    print(f"  dtype      {np.dtype(indexed.dtype).name}")
    if FLAGS.eod_id is None:
        print("  EOD        (give --eod_id to count end-of-document tokens)")
    else:
        with progress_bars.bar(FLAGS.progress, total=tokens, unit="tok", unit_scale=True,
                               desc="counting EOD") as bar:
            eod = inspection.count_token(indexed, FLAGS.eod_id, bar.update)
        ending = inspection.ends_with(indexed, FLAGS.eod_id)
        print(f"  EOD        {eod:,} tokens of id {FLAGS.eod_id}; {ending:,} of "
              f"{len(lengths):,} documents end with one")
    values = inspection.length_percentiles(lengths)
    cells = "  ".join(
        f"p{q}={value:,.0f}" for q, value in zip(inspection.PERCENTILES, values)
    )
    print(f"  document length percentiles (tokens): {cells}")
    print(f"  mean document length: {tokens / max(1, len(lengths)):,.1f} tokens")
    first, mean, largest = inspection.binned_lengths(lengths, 50)
    path = inspect_plots.save(
        inspect_plots.corpus_figure(prefix, lengths, first, mean, largest),
        _output(f"{_stem(prefix)}_lengths.png"),
    )
    _wrote([path])


# -- config ---------------------------------------------------------------------------


def _build() -> tuple:
    config, sizes, extras = data_flags.gpt_config()
    if extras["mock"]:
        raise DataError("config: mock data has no corpus to inspect; set data_path")
    recipes = plan_splits(config, sizes, extras)
    start = time.perf_counter()
    datasets = build_splits(config, sizes, extras, recipes, FLAGS.progress)
    print(f"indices built or loaded in {time.perf_counter() - start:.2f} s; cache: "
          f"{config.path_to_cache}")
    return config, sizes, datasets


def _other_order(blend, order: str):
    """The blend's index in ``order`` (its own, or the other order built in memory)."""
    if order == blend.blend_order:
        return np.asarray(blend.dataset_index)
    from dataclasses import replace

    from megadata_core import BlendedDataset

    other = BlendedDataset(
        blend.datasets, blend.weights, blend.size, replace(blend.config, blend_order=order),
        use_cache=False,
    )
    return np.asarray(other.dataset_index)


def _steps(size: int) -> np.ndarray:
    """Every prefix length up to 2^20 samples, then 4,096 log-spaced ones."""
    if size <= 1 << 20:
        return np.arange(1, size + 1, dtype=np.int64)
    return np.unique(np.geomspace(1, size, 4096).astype(np.int64))


def _schedule_steps(dataset) -> np.ndarray:
    """4,096 evenly spaced sample counts, every stage's first and last ones, and the end."""
    size = len(dataset)
    starts = dataset.starts[dataset.starts < size]
    marks = np.concatenate([
        np.linspace(1, size, min(size, 4096)).astype(np.int64), starts + 1, starts,
        [size],
    ])
    return np.unique(marks[(marks >= 1) & (marks <= size)])


def _schedule_plot(split: str, dataset) -> str | None:
    from megadata_cli import inspect_plots

    if not len(dataset):
        return None
    names = [member.indexed.path_prefix for member in dataset.datasets]
    steps = _schedule_steps(dataset)
    requested, realized, distance = inspection.schedule_shares(
        np.asarray(dataset.dataset_index), dataset.starts, dataset.stage_weights, steps
    )
    ends = np.append(dataset.starts[1:], len(dataset))
    print(f"\n{split}: each stage's weights (requested) and realized shares:")
    for k, start in enumerate(dataset.starts.tolist()):
        if start >= len(dataset):
            print(f"  stage {k} from sample {start:,}: after the split's {len(dataset):,} samples")
            continue
        last = int(np.searchsorted(steps, min(int(ends[k]), len(dataset))))
        worst = distance[np.searchsorted(steps, start + 1) : last + 1].max(axis=0)
        print(f"  stage {k} from sample {start:,} (step {start // FLAGS.global_batch_size:,}):"
              " requested " + " ".join(f"{w:.4f}" for w in dataset.stage_weights[k])
              + "; realized " + " ".join(f"{r:.4f}" for r in realized[last])
              + "; largest distance " + " ".join(f"{d:.3f}" for d in worst) + " samples")
    figure = inspect_plots.schedule_figure(
        split, names, steps, requested, realized, distance, dataset.starts,
        FLAGS.global_batch_size,
    )
    return inspect_plots.save(figure, _output(f"{split}_schedule_shares.png"))


def config_command() -> None:
    from megadata_cli import inspect_plots
    from megadata_core import ScheduledBlendedDataset

    config, sizes, datasets = _build()
    print_tables(built_tables(datasets), sizes, config)
    written = []
    for split, dataset in zip(SPLITS, datasets):
        if dataset is None or isinstance(dataset, list) or not hasattr(dataset, "datasets"):
            continue
        if isinstance(dataset, ScheduledBlendedDataset):
            path = _schedule_plot(split, dataset)
            written.extend([path] if path else [])
            continue
        names = [member.indexed.path_prefix for member in dataset.datasets]
        weights = np.asarray(dataset.weights, dtype=np.float64)
        weights = weights / weights.sum()
        steps = _steps(len(dataset))
        counts = {}
        print(f"\n{split}: samples of each dataset in every prefix of the blend order, "
              "against weight x prefix length:")
        for order in (dataset.blend_order, *(o for o in modes.names("blend_order")
                                              if o != dataset.blend_order)):
            index = _other_order(dataset, order)
            counts[order] = inspection.prefix_counts(index, len(names), steps)
            worst = np.abs(counts[order] - weights * steps[:, None]).max(axis=0)
            final = counts[order][-1] / steps[-1]
            mark = " (this config's)" if order == dataset.blend_order else ""
            print(f"  {order}{mark}: realized shares "
                  + " ".join(f"{share:.4f}" for share in final)
                  + "; largest distance " + " ".join(f"{value:.3f}" for value in worst)
                  + " samples")
        figure = inspect_plots.shares_figure(
            split, names, weights, steps, counts, FLAGS.global_batch_size
        )
        written.append(inspect_plots.save(figure, _output(f"{split}_blend_shares.png")))
    if not written:
        print("\nno blended split: no share plot")
    _wrote(written)


# -- samples --------------------------------------------------------------------------


def _split(datasets) -> object:
    dataset = datasets[SPLITS.index(FLAGS.which_split)]
    if dataset is None:
        raise DataError(f"which_split: the config builds no {FLAGS.which_split} split")
    if isinstance(dataset, list):  # multiple validation sets: the first
        print(f"{FLAGS.which_split}: {len(dataset)} validation sets; showing the first")
        dataset = dataset[0]
    return dataset


def _indices() -> np.ndarray:
    try:
        return np.array([int(value) for value in FLAGS.indices], dtype=np.int64)
    except ValueError:
        raise DataError(f"--indices: {','.join(FLAGS.indices)!r} are not integers") from None


def _tokenizer():
    kind = FLAGS.tokenizer_type
    files = {
        "vocab_file": FLAGS.vocab_file, "merge_file": FLAGS.merge_file,
        "tokenizer_model": FLAGS.tokenizer_model, "vocab_size": FLAGS.vocab_size,
    }
    if kind is None:
        given = [name for name, value in files.items() if value is not None]
        if FLAGS.tokenizer_file or given:
            raise DataError("--tokenizer_type: give it with the tokenizer's files")
        return None
    from megadata_adapters.tokenizing.text_tokenizers import load_tokenizer

    options = {name: value for name, value in files.items() if value is not None}
    tokenizer = load_tokenizer(kind, FLAGS.tokenizer_file, **options)
    if not hasattr(tokenizer, "decode"):
        raise DataError(f"--tokenizer_type: {kind} cannot decode")
    return tokenizer


def samples_command() -> None:
    from megadata_cli import inspect_samples

    tokenizer = _tokenizer()  # a missing tokenizer file fails before any build
    indices = _indices()
    config, _, datasets = _build()
    dataset = _split(datasets)
    sources = inspection.sample_sources(dataset, indices, tokens=True)
    batch = dataset.__getitems__(indices)
    members = inspection.members(dataset)
    eod = config.eod_id
    pages, conversations = [], []
    for row, index in enumerate(indices.tolist()):
        tokens = np.asarray(batch["tokens"][row])
        documents = sources.documents[row, : len(tokens)]
        segments = batch.get("segment_ids")
        segments = None if segments is None else np.asarray(segments[row])
        loss_mask = np.asarray(batch["loss_mask"][row])
        sample_runs = inspect_samples.runs(tokens, documents, loss_mask, segments, eod)
        member = int(sources.dataset_id[row])
        ids = list(dict.fromkeys(documents[documents >= 0].tolist()))
        heading = (
            f"sample {index} of {FLAGS.which_split} (dataset {member} "
            f"{members[member].indexed.path_prefix}, its sample "
            f"{int(sources.member_sample[row])}): {len(tokens):,} tokens, {len(ids)} "
            f"document(s) {ids[:12]}{' ...' if len(ids) > 12 else ''}, "
            f"{int(np.count_nonzero(loss_mask == 0)):,} loss-masked"
            + (f", segments {sorted(set(segments.tolist()))}" if segments is not None else "")
        )
        conversation = inspect_samples.is_conversation(members[member])
        if conversation:
            roles = "+".join(role.name for role in config.trained_roles_mode.roles)
            heading += (f"; conversation corpus: {int(np.count_nonzero(loss_mask)):,} "
                        f"trained (labels of {roles})")
        print(f"\n{heading}")
        print(inspect_samples.as_text(tokens, sample_runs, tokenizer))
        pages.append((heading, tokens, sample_runs))
        conversations.append(conversation)
    print()
    if FLAGS.html:
        path = _output(f"{FLAGS.which_split}_samples.html")
        os.makedirs(FLAGS.output_dir, exist_ok=True)
        temp = f"{path}.{os.getpid()}.tmp"
        with open(temp, "w", encoding="utf-8") as stream:
            stream.write(inspect_samples.as_html(
                f"megadata samples: {FLAGS.which_split} {','.join(FLAGS.indices)}",
                pages, tokenizer, conversations,
            ))
        os.replace(temp, path)
        _wrote([path])


# -- order ----------------------------------------------------------------------------


def order_command() -> None:
    from megadata_cli import inspect_plots

    _, _, datasets = _build()
    dataset = _split(datasets)
    batch = FLAGS.global_batch_size
    count = min(len(dataset), batch * FLAGS.batches)
    sources = inspection.sample_sources(dataset, np.arange(count))
    members = inspection.members(dataset)
    sizes = [len(member.indexed) for member in members]
    regions = inspection.read_regions(sources, sizes, batch, FLAGS.regions)
    names = [member.indexed.path_prefix for member in members]
    print(f"{FLAGS.which_split}: the first {regions.shape[2]} global batches of {batch} "
          f"({count:,} of {len(dataset):,} samples)")
    for j, name in enumerate(names):
        read = int(regions[j].sum())
        touched = int(np.count_nonzero(regions[j].sum(axis=1)))
        print(f"  dataset {j} {name}: {read:,} samples ({read / max(1, count):.4f}), "
              f"starting in {touched} of {FLAGS.regions} regions of its corpus")
    figure = inspect_plots.order_figure(FLAGS.which_split, names, regions, batch)
    _wrote([inspect_plots.save(figure, _output(f"{FLAGS.which_split}_read_order.png"))])


# -- batch, where ------------------------------------------------------------------------


def _step_plan(config):
    from megadata_cli import inspect_provenance

    schedule = None
    if FLAGS.step_batch_size_schedule is not None:
        from megadata_core.batch_ramp import BatchSizeSchedule

        schedule = BatchSizeSchedule.parse(FLAGS.step_batch_size_schedule,
                                           config.sequence_length)
    return inspect_provenance.Steps(FLAGS.global_batch_size, schedule,
                                    FLAGS.micro_batch_size, FLAGS.data_parallel_size)


def batch_command() -> None:
    from megadata_cli import inspect_provenance

    if FLAGS.step is None:
        raise DataError("--step: give the training step to show")
    tokenizer = _tokenizer()
    config, _, datasets = _build()
    dataset = _split(datasets)
    start = time.perf_counter()
    lines, positions, segments = inspect_provenance.batch_report(
        dataset, FLAGS.which_split, FLAGS.step, _step_plan(config), FLAGS.dp_rank,
        FLAGS.preview_tokens, tokenizer,
    )
    print("\n".join(lines))
    print(f"found in {time.perf_counter() - start:.3f} s")
    if FLAGS.html:
        path = inspect_provenance.batch_html(
            _output(f"{FLAGS.which_split}_step_{FLAGS.step}.html"),
            f"megadata: step {FLAGS.step} of {FLAGS.which_split}", dataset, positions,
            segments, config.eod_id, tokenizer,
        )
        _wrote([path])


def where_command() -> None:
    from megadata_cli import inspect_provenance

    if FLAGS.prefix is None or FLAGS.document is None:
        raise DataError("--prefix, --document: give the dataset prefix and the document id")
    config, _, datasets = _build()
    dataset = _split(datasets)
    start = time.perf_counter()
    lines, _ = inspect_provenance.where_report(
        dataset, FLAGS.which_split, FLAGS.prefix, FLAGS.document, _step_plan(config)
    )
    print("\n".join(lines))
    print(f"found in {time.perf_counter() - start:.3f} s")


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in COMMANDS:
        raise app.UsageError(f"give a command: {', '.join(COMMANDS)} (got {argv[1:]})")
    command, arguments = argv[1], argv[2:]
    expected = 1 if command == "corpus" else 0
    if len(arguments) != expected:
        what = "one corpus prefix" if expected else "no arguments"
        raise app.UsageError(f"{command} takes {what}, got {arguments}")
    try:
        if command == "corpus":
            corpus(arguments[0])
        elif command == "config":
            config_command()
        elif command == "samples":
            samples_command()
        elif command == "batch":
            batch_command()
        elif command == "where":
            where_command()
        else:
            order_command()
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


def cli() -> None:
    """The console script: parse ``sys.argv`` and run."""
    tool_main.run(main)


if __name__ == "__main__":
    cli()
