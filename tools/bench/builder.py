"""The ``builder`` suite of tools/bench.py: build_datasets beside megatron-core's
BlendedMegatronDatasetBuilder, for a blend of many small corpora.

Usage::

    python tools/bench.py builder                            # full run: 1,000 prefixes
    python tools/bench.py builder --scale 0.01 --repeats 1   # smoke run (10 prefixes)
    python tools/bench.py builder --prefixes 10000 --repeats 1   # the large-blend setup

With ``--prefixes N`` the setup is the large-blend one instead (issue 18): N corpora of
1,000 documents (lognormal lengths, mean ~100 tokens), weights proportional to each
corpus's tokens, split ``"969,30,1"`` (every corpus keeps a test document: megatron-core
loops forever on a split without tokens), sizes of about one epoch per split.

Setup: ``1000 x scale`` corpora of 200 documents each (lognormal lengths, mean ~200
tokens, uint16), one weighted blend over all of them (random weights), split
``"98,2,0"``, S = 256, sizes ``[150 N, 10 N, 0]`` (about one epoch of every corpus),
``mid_level_dataset_surplus=0.05`` (Megatron's 0.005 lets this many tiny valid members
be oversampled, which it rejects). A two-corpus build on each side first pays the
one-time costs (imports, compiled helpers) outside the timings.

Items:

* ``cold``: the whole build with a fresh cache directory on each run (every index is
  built and written; both sides also open every corpus). Megatron runs with a one-rank
  gloo process group, as in training (its BlendedDataset cache needs torch.distributed).
* ``balanced``: ours cold and warm again with ``blend_order="balanced"`` (the default
  when a config names none), beside Megatron in its own order (values differ by design).
* ``warm``: the same build again on the cache the cold run left (both load from it):
  *startup*, what a training job restarted on the same data pays. Ours loads one
  cache entry for the whole build (every small member's indices and the blends'), reads
  each small .idx once and validates nothing it has already validated; megatron opens
  and loads every member's cached index files. Right after the cold build the cache
  files are new, so this warm start checks every byte of them; ours is then timed again
  in the cache's three verification states (tools/bench/cache_states.py): every byte
  checked, files vouched for by their verified-files lists (a restart), no check.

Checks: the lengths of every split and member dataset are equal, and the blend's
``dataset_index`` / ``dataset_sample_index`` are equal (``blend_order="megatron"``).
The suite reaches tools/bench.py only through the ``Bench`` object it is given.
"""

from __future__ import annotations

import errno
import gc
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np
from absl import flags

from bench.cache_states import STATES, time_states
from bench.harness import measure
from bench.peers import quiet_import

DOCUMENTS = 200
MEAN_LENGTH = 200
SEQUENCE = 256
SPLIT = "98,2,0"
SEED = 1234
SURPLUS = 0.05
BLEND_ORDER = "megatron"
EOD = 0
VOCAB = 50_000
GOAL_RATIO = 0.1  # the open goal: startup <= 0.1x megatron-core's builder time
#: The large-blend setup (--prefixes): documents per corpus, mean length, split, goals.
LARGE_DOCUMENTS = 1000
LARGE_MEAN_LENGTH = 100
LARGE_SPLIT = "969,30,1"
LARGE_GOALS = {"cold": 0.2, "warm": 0.05}  # time ratios ours / megatron-core
LARGE_WARM_SECONDS = 1.0

flags.DEFINE_integer(
    "prefixes", None,
    "builder: blend this many corpora in the large-blend setup (weights proportional to "
    "tokens, split 969,30,1); default: the 1,000 x --scale setup.",
)
FLAGS = flags.FLAGS


def progress(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


def median(values: list) -> float | None:
    values = [value for value in values if value is not None]
    return statistics.median(values) if values else None


def write_corpora(
    directory: str,
    count: int,
    rng: np.random.Generator,
    documents: int = DOCUMENTS,
    mean_length: int = MEAN_LENGTH,
) -> list[str]:
    """``count`` small uint16 corpora (one sequence per document, each ending in EOD)."""
    import megadata_core as mdc

    prefixes = []
    mu = np.log(mean_length) - 0.5
    for number in range(count):
        lengths = np.maximum(2, rng.lognormal(mu, 1.0, documents)).astype(np.int64)
        tokens = rng.integers(1, VOCAB, int(lengths.sum()), dtype=np.uint16)
        tokens[np.cumsum(lengths) - 1] = EOD
        prefix = os.path.join(directory, f"corpus_{number:05d}")
        with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
            writer.add_document(tokens, lengths.tolist())
        prefixes.append(prefix)
    return prefixes


class _Tokenizer:
    """What megatron's GPTDataset reads from a tokenizer."""

    eod = EOD
    vocab_size = VOCAB
    unique_identifiers = {"class": "bench_builder._Tokenizer", "eod": EOD}


def import_megatron(workdir: str):
    """(builder class, GPTDataset, GPTDatasetConfig), with a one-rank process group; or
    None when megatron-core is not installed."""
    modules = quiet_import(
        "torch",
        "torch.distributed",
        "megatron.core.datasets.blended_megatron_dataset_builder",
        "megatron.core.datasets.gpt_dataset",
    )
    if modules is None:
        return None
    torch, dist, builder_module, gpt_module = modules
    BlendedMegatronDatasetBuilder = builder_module.BlendedMegatronDatasetBuilder  # noqa: N806
    GPTDataset, GPTDatasetConfig = gpt_module.GPTDataset, gpt_module.GPTDatasetConfig  # noqa: N806
    torch.set_num_threads(1)
    if not dist.is_initialized():
        store = os.path.join(workdir, "process_group")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    return BlendedMegatronDatasetBuilder, GPTDataset, GPTDatasetConfig


def megatron_build(megatron, blend, sizes, cache: str, split: str = SPLIT):
    builder, gpt, config_class = megatron
    config = config_class(
        random_seed=SEED,
        sequence_length=SEQUENCE,
        blend=blend,
        split=split,
        mid_level_dataset_surplus=SURPLUS,
        path_to_cache=cache,
        tokenizer=_Tokenizer(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return builder(gpt, list(sizes), lambda: True, config).build()


def ours_build(
    blend, sizes, cache: str, blend_order: str = BLEND_ORDER, split: str = SPLIT
):
    import megadata_core as mdc
    from megadata_core.build.builder import build_datasets

    config = mdc.GPTDataConfig(
        random_seed=SEED,
        sequence_length=SEQUENCE,
        blend=blend,
        split=split,
        mid_level_dataset_surplus=SURPLUS,
        path_to_cache=cache,
        eod_id=EOD,
        create_attention_mask=False,
        blend_order=blend_order,
    )
    return build_datasets(config, sizes)


def out_of_files(error: BaseException) -> str | None:
    """``"fails: Too many open files at ulimit N"`` when ``error`` (or its cause) is the
    process running out of descriptors, else None."""
    while error is not None:
        if isinstance(error, OSError) and error.errno == errno.EMFILE or (
            "Too many open files" in str(error)
        ):
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            return f"fails: Too many open files at ulimit {soft}"
        error = error.__cause__ or error.__context__
    return None


def _same(ours, theirs) -> tuple[bool, str]:
    """Lengths of every split and member, and the blend indices, equal."""
    for name, mine, reference in zip(("train", "valid", "test"), ours, theirs):
        if (mine is None) != (reference is None):
            return False, f"{name}: built on one side only"
        if mine is None:
            continue
        if len(mine) != len(reference):
            return False, f"{name}: {len(mine)} != {len(reference)} samples"
        members = [len(d) for d in mine.datasets], [len(d) for d in reference.datasets]
        if members[0] != members[1]:
            return False, f"{name}: member lengths differ"
        if not np.array_equal(mine.dataset_index, reference.dataset_index) or not (
            np.array_equal(mine.dataset_sample_index, reference.dataset_sample_index)
        ):
            return False, f"{name}: blend indices differ"
    return True, ""


class BlendTimer:
    """Seconds spent in a BlendedDataset's index build/load (a method patched with a
    timing wrapper while the context is open), to tell the builder's own cost apart."""

    def __init__(self, cls, method: str) -> None:
        self.cls, self.method, self.seconds = cls, method, 0.0

    def __enter__(self) -> BlendTimer:
        original = self.original = getattr(self.cls, self.method)
        timer = self

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                timer.seconds += time.perf_counter() - start

        setattr(self.cls, self.method, timed)
        return self

    def __exit__(self, *exc) -> None:
        setattr(self.cls, self.method, self.original)


def _blend_timer(side: str) -> BlendTimer:
    if side in ("ours", "balanced"):
        from megadata_core.datasets.blended_dataset import BlendedDataset

        return BlendTimer(BlendedDataset, "_build")
    from megatron.core.datasets.blended_dataset import BlendedDataset

    return BlendTimer(BlendedDataset, "_build_indices")


def many_prefix_blend(bench, count: int, suite: str) -> tuple:
    """``count`` small corpora with lognormal weights: ``(blend, sizes, megatron)``, the
    blend as ``(prefixes, weights)``, sizes [150 n, 10 n, 0], megatron-core's classes or
    None."""
    rng = np.random.default_rng(bench.seed)
    data = bench.path("corpora", "x")
    progress(f"{suite}: writing {count:,} corpora of {DOCUMENTS} documents")
    prefixes = write_corpora(os.path.dirname(data), count, rng)
    weights = rng.lognormal(0.0, 1.0, count).tolist()
    return (prefixes, weights), [150 * count, 10 * count, 0], import_megatron(bench.workdir)


def token_weighted_blend(bench, count: int, suite: str) -> tuple:
    """The large-blend setup: ``count`` corpora of ``LARGE_DOCUMENTS`` documents, weights
    proportional to their tokens: ``(blend, sizes, megatron)``, sizes about one epoch of
    each split of ``LARGE_SPLIT`` (the blend's own tokens / S), megatron-core or None."""
    import megadata_core as mdc

    rng = np.random.default_rng(bench.seed)
    data = bench.path("corpora", "x")
    progress(f"{suite}: writing {count:,} corpora of {LARGE_DOCUMENTS} documents")
    prefixes = write_corpora(
        os.path.dirname(data), count, rng, LARGE_DOCUMENTS, LARGE_MEAN_LENGTH
    )
    tokens = [
        int(np.asarray(mdc.IndexedDataset(prefix).sequence_lengths).sum(dtype=np.int64))
        for prefix in prefixes
    ]
    fractions = np.array([float(part) for part in LARGE_SPLIT.split(",")])
    fractions /= fractions.sum()
    sizes = [int(sum(tokens) * fraction) // SEQUENCE for fraction in fractions]
    return (prefixes, [float(t) for t in tokens]), sizes, import_megatron(bench.workdir)


def suite_builder(bench) -> None:
    """Startup of a blend of many small corpora: cold (fresh cache) and warm (cache hit)."""
    large = FLAGS.prefixes is not None
    if large:
        count = FLAGS.prefixes
        blend, sizes, megatron = token_weighted_blend(bench, count, "builder")
        split, documents = LARGE_SPLIT, LARGE_DOCUMENTS
    else:
        count = bench.scaled(1000)
        blend, sizes, megatron = many_prefix_blend(bench, count, "builder")
        split, documents = SPLIT, DOCUMENTS
    prefixes, weights = blend
    if megatron is None:
        bench.note("megatron-core is not installed: its column is n/a.")
    sides = {"ours": lambda cache: ours_build(blend, sizes, cache, split=split)}
    if bench.wants("balanced"):  # what a config that names no blend_order gets
        sides["balanced"] = lambda cache: ours_build(blend, sizes, cache, "balanced", split)
    if megatron is not None and bench.wants("megatron"):
        sides["megatron"] = lambda cache: megatron_build(megatron, blend, sizes, cache, split)
    warmup = {
        "ours": lambda *a: ours_build(*a, split=split),
        "balanced": lambda *a: ours_build(*a, "balanced", split),
        "megatron": lambda *a: megatron_build(megatron, *a, split),
    }
    for side in sides:
        cache = tempfile.mkdtemp(prefix=f"warmup_{side}_", dir=bench.workdir)
        warmup[side]((prefixes[:2], weights[:2]), [300, 20, 2 if large else 0], cache)
        shutil.rmtree(cache, ignore_errors=True)
    times = {kind: {side: [] for side in sides} for kind in ("cold", "members", "warm")}
    states = {state: [] for state in STATES}
    last: dict[str, object] = {}
    failed: dict[str, str | None] = {}  # side -> why it has no figure
    warm_failed: dict[str, str] = {}  # side -> why it has no warm figure (cold one kept)
    compared: tuple[bool, str] | None = None  # ours against megatron-core's cold build
    for repeat in range(bench.repeats):
        order = list(sides) if repeat % 2 == 0 else list(reversed(sides))
        for side in order:
            cache = tempfile.mkdtemp(prefix=f"cache_{side}_", dir=bench.workdir)
            progress(f"builder: {side} cold build {repeat + 1}/{bench.repeats}")
            if side in failed:
                continue
            try:
                with _blend_timer(side) as blending:
                    seconds, last[side] = measure(lambda s=side, c=cache: sides[s](c))
            except Exception as error:  # a peer out of descriptors is a finding, not a crash
                failed[side] = out_of_files(error)
                if failed[side] is None or side != "megatron":
                    raise
                progress(f"builder: {side} {failed[side]}")
                last.pop(side, None)
                gc.collect()  # its maps and descriptors go with the half-built datasets
                shutil.rmtree(cache, ignore_errors=True)
                continue
            times["cold"][side].append(seconds)
            times["members"][side].append(seconds - blending.seconds)
            if "ours" in last and "megatron" in last:  # compared before a warm start
                compared = _same(last["ours"], last["megatron"])
            if bench.wants("warm"):
                # a restart holds nothing of the cold build: megatron-core's members keep
                # 3 descriptors each, twice that would fail at a prefix count it survives
                last.pop(side, None)
                progress(f"builder: {side} warm build {repeat + 1}/{bench.repeats}")
                try:
                    seconds, last[side] = measure(lambda s=side, c=cache: sides[s](c))
                except Exception as error:  # megatron-core's warm start maps every index
                    why = out_of_files(error)
                    if why is None or side != "megatron":
                        raise
                    progress(f"builder: {side} warm start {why}")
                    warm_failed[side] = why
                    gc.collect()
                    shutil.rmtree(cache, ignore_errors=True)
                    continue
                times["warm"][side].append(seconds)
                if side == "ours":
                    for state, seconds in time_states(
                        lambda c=cache: sides["ours"](c), cache, 1
                    ).items():
                        states[state] += seconds
            shutil.rmtree(cache, ignore_errors=True)
    label = f"{count:,} prefixes x {documents} docs"
    rows = [
        ("cold", f"builder cold start, fresh cache, {label}"),
        ("members", f"builder cold start without the blend indices, {label}"),
        ("warm", f"builder warm start, cache hit, {label}"),
    ]
    if "balanced" in sides:
        rows += [
            ("cold", f"builder cold start, ours in the default balanced order, {label}"),
            ("warm", f"builder warm start, ours in the default balanced order, {label}"),
        ]
    for number, (kind, metric) in enumerate(rows):
        side = "balanced" if number >= 3 else "ours"
        if kind != "warm" or bench.wants("warm"):
            bench.row(
                metric,
                "s",
                "lower",
                median(times[kind][side]),
                failed.get("megatron")
                or (warm_failed.get("megatron") if kind == "warm" else None)
                or median(times[kind].get("megatron", [])),
                bench.repeats,
            )
    if bench.wants("warm"):
        for state, what in (
            ("checked", "every cache byte checked"),
            ("vouched", "files vouched for by verified-files lists"),
            ("unverified", "whole-file check off (floor)"),
        ):
            bench.row(f"builder warm start, ours, {what}, {label}", "s", "lower",
                      median(states[state]), None, bench.repeats)
        cold, floor = median(times["cold"]["ours"]), median(states["unverified"])
        bench.note(
            f"builder: checking every cache byte adds {median(states['checked']) - floor:.3f} s "
            f"to a warm start of {floor:.3f} s (cold build {cold:.3f} s), once per file "
            f"identity; a restart on unchanged files adds "
            f"{median(states['vouched']) - floor:.3f} s"
        )
    if "megatron" in last:
        compared = _same(last["ours"], last["megatron"])
    if compared is not None:
        ok, detail = compared
        bench.check("builder: split lengths, member lengths and blend indices equal", ok, detail)
        per_prefix = median(times["cold"]["megatron"]) / count * 1000
        bench.note(
            f"builder: megatron-core cold start costs {per_prefix:.2f} ms per prefix here "
            "(local disk, one rank)"
        )
    elif failed.get("megatron"):
        bench.check("builder: split lengths equal", None, f"megatron-core {failed['megatron']}")
        bench.note(
            f"builder: megatron-core {failed['megatron']} (it keeps every member's .bin and "
            "index files open; raise `ulimit -n` in the shell running the bench to time it)"
        )
    else:
        bench.check("builder: split lengths equal", None, "megatron-core not installed")
    blend_seconds = {
        side: median([c - m for c, m in zip(times["cold"][side], times["members"][side])])
        for side in sides
        if times["cold"][side]
    }
    bench.note(
        "builder: blend indices (BlendedDataset build, cold): "
        + ", ".join(f"{side} {seconds:.3f} s" for side, seconds in blend_seconds.items())
    )
    from megadata_core.format.reader import DEFAULT_MAX_OPEN_FILES

    bench.note(
        f"builder: ours with max_open_files={DEFAULT_MAX_OPEN_FILES} (the default) at "
        f"ulimit -n {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}"
    )
    bench.note(
        "builder: 'without the blend indices' = the cold start minus the time in the "
        "BlendedDatasets' index build (ours: BlendedDataset._build, megatron: "
        "BlendedDataset._build_indices): opening the corpora and every member index"
    )
    if "megatron" in sides:
        for kind, what in (("warm", "startup (warm start, cache hit)"), ("cold", "cold start")):
            ours, theirs = median(times[kind]["ours"]), median(times[kind]["megatron"])
            goal = LARGE_GOALS[kind] if large else GOAL_RATIO
            if ours is not None and theirs:
                bench.note(
                    f"builder: {what}: ours {ours:.3f} s, megatron {theirs:.3f} s, "
                    f"ratio {ours / theirs:.3f} (goal <= {goal}x: "
                    f"{'met' if ours / theirs <= goal else 'not met'})"
                )
    warm = median(times["warm"]["ours"])
    if large and warm is not None:
        bench.note(
            f"builder: warm start {warm:.3f} s (goal <= {LARGE_WARM_SECONDS} s: "
            f"{'met' if warm <= LARGE_WARM_SECONDS else 'not met'})"
        )
    bench.note(
        f"builder: blend of {count:,} corpora, weights "
        f"{'proportional to tokens' if large else 'lognormal'}, split {split!r}, "
        f"S={SEQUENCE}, sizes {sizes}, blend_order={BLEND_ORDER!r}, "
        f"{os.cpu_count()} CPUs"
    )
