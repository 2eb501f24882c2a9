"""The ``schedule`` suite of tools/bench.py: blends that change mid-run.

Usage::

    python tools/bench.py schedule                            # full run (~2 min, 2 cores)
    python tools/bench.py schedule --scale 0.05 --repeats 1   # quick look

Items:

* ``repeats``: a Megatron user trains on blend A (0.6 / 0.3 / 0.1 over web, code and
  books corpora) to 50% of the run, then changes the weights to B (0.2 / 0.3 / 0.5) and
  rebuilds: megatron-core's own builder (same corpora, seed and size) and the resumed
  run's samples ``[N/2, N)`` of blend B. Ours: the same run as a blend schedule edited at
  N/2. Counted at the token level (every input token's corpus position): samples of the
  second half holding a token the first half already trained on, those tokens, and the
  member samples skipped (never served, although the run read past them in that
  member's order). Every corpus is read for less than one epoch in the whole run, so
  any token seen twice is a repeat, not a new epoch.
* In ``repeats``, Levanter beside both (notes and a check; the table's peer stays
  megatron-core): ``marin-levanter``'s ``MixtureDataset`` (its own code, in an overlay
  venv in the bench cache, :mod:`bench.levanter_side`; created on first use at scale >=
  0.1, only used below it; n/a with the reason when it cannot be built or imported) with
  weight stages [(0, A), (switch, B)], ``switch`` the run's half rounded to Levanter's
  block size (its default 2048; stage starts must be block multiples, an edit at N/2
  itself is refused), over in-memory ``(name, index)`` datasets long enough that none
  wraps: second-half samples whose ``(dataset, index)`` the first half served, those a
  rebuild with B alone serves again, indices skipped (Levanter shuffles within a block,
  so an unfinished last block leaves some behind), whether adding stage B keeps ``[0,
  switch)``, and the largest ``|count_j - w_j m|`` over each stage's prefixes (ours
  beside it).
* ``cold`` / ``read``: a 1,000 x scale prefix, 20-stage schedule (stages evenly spaced,
  each stage's weights the static blend's times lognormal noise) against the static
  blend of the same prefixes and size (the builder suite's corpora): build_datasets with
  a fresh cache directory (goal <= 1.5x), and batched reads of 32 random samples
  (``__getitems__``; goal >= 0.9x the static blend's speed, i.e. time <= 1/0.9). A note
  gives Levanter's MixtureDataset with the same stage weights (starts rounded to its
  blocks) over as many index-only datasets: construction, the same number of random
  batches, and as many batches read in order (index mapping alone, no tokens).
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np

from bench.builder import (
    SEED,
    SEQUENCE,
    SPLIT,
    import_megatron,
    many_prefix_blend,
    median,
    megatron_build,
    ours_build,
    progress,
    write_corpora,
)
from bench.harness import measure
from bench.levanter_side import LEVANTER, levanter_many, levanter_schedule

WEIGHTS_A = (0.6, 0.3, 0.1)
WEIGHTS_B = (0.2, 0.3, 0.5)
NAMES = ("web", "code", "books")
STAGES = 20
GOALS = {"cold": 1.5, "read": 1 / 0.9}  # time ratios schedule / static blend
BATCHES, BATCH = 200, 32
READ_SLICES = 10  # reads timed in this many slices, the sides alternating


# -- repeats against a Megatron rebuild ----------------------------------------------------


def _token_offsets(corpus) -> np.ndarray:
    """int64 [N + 1]: where each sequence (one per document) starts among the corpus's
    tokens."""
    lengths = np.asarray(corpus.sequence_lengths, dtype=np.int64)
    return np.concatenate([[0], np.cumsum(lengths)])


def _sample_tokens(member, sample: int, offsets: np.ndarray) -> np.ndarray:
    """int64 [S]: the corpus positions of a concat GPT sample's input tokens (Megatron's
    document_index / sample_index / shuffle_index, which both sides hold)."""
    row = int(member.shuffle_index[sample])
    (d0, o0), (d1, o1) = member.sample_index[row], member.sample_index[row + 1]
    pieces = []
    for position in range(int(d0), int(d1) + 1):
        document = int(member.document_index[position])
        begin = int(o0) if position == d0 else 0
        end = int(o1) + 1 if position == d1 else int(offsets[document + 1] - offsets[document])
        pieces.append(np.arange(offsets[document] + begin, offsets[document] + end))
    return np.concatenate(pieces)[:SEQUENCE]


def _member_sample(member, k: int):
    """(one-epoch GPTDataset, its sample) for sample k of a member (EpochChain or not)."""
    passes = getattr(member, "passes", None)
    if passes is None:
        return member, k
    number = int(np.searchsorted(member.offsets, k, side="right") - 1)
    return passes[number], k - int(member.offsets[number])


def _coverage(blend, lo: int, hi: int, offsets: list, seen: list | None = None):
    """Mark the tokens blend samples [lo, hi) read; with ``seen`` (the first half's marks)
    also count the samples and tokens already seen."""
    marks = [np.zeros(int(o[-1]), dtype=bool) for o in offsets]
    repeated_samples = repeated_tokens = 0
    index, samples = np.asarray(blend.dataset_index), np.asarray(blend.dataset_sample_index)
    for position in range(lo, hi):  # a benchmark's count, not a data path
        j = int(index[position])
        member, k = _member_sample(blend.datasets[j], int(samples[position]))
        tokens = _sample_tokens(member, k, offsets[j])
        if seen is not None:
            again = int(seen[j][tokens].sum())
            repeated_tokens += again
            repeated_samples += again > 0
        marks[j][tokens] = True
    return marks, repeated_samples, repeated_tokens


def _skipped(blend, lo: int, hi: int, offsets: list, seen: list, served: list) -> int:
    """Member samples the run read past in its members' orders (below the furthest one
    served in [lo, hi)) whose tokens it never served."""
    index, samples = np.asarray(blend.dataset_index), np.asarray(blend.dataset_sample_index)
    skipped = 0
    for j in range(len(blend.datasets)):
        reads = samples[lo:hi][index[lo:hi] == j]
        if not len(reads):
            continue
        for k in range(int(reads.max())):
            member, local = _member_sample(blend.datasets[j], k)
            tokens = _sample_tokens(member, local, offsets[j])
            if not (seen[j][tokens].any() or served[j][tokens].any()):
                skipped += 1
    return skipped


def _repeat_counts(blend_a, blend_b, half: int, size: int, offsets: list) -> tuple:
    seen, _, _ = _coverage(blend_a, 0, half, offsets)
    served, samples, tokens = _coverage(blend_b, half, size, offsets, seen)
    return samples, tokens, _skipped(blend_b, half, size, offsets, seen, served)


def _repeats(bench) -> None:
    import megadata_core as mdc

    megatron = import_megatron(bench.workdir)
    rng = np.random.default_rng(bench.seed)
    documents = [bench.scaled(n, minimum=20) for n in (20_000, 8_000, 4_000)]
    directory = bench.path("schedule_corpora", "x")
    prefixes = [  # each written as corpus_00000, then named
        _renamed(write_corpora(os.path.dirname(directory), 1, rng, count)[0], name)
        for count, name in zip(documents, NAMES)
    ]
    offsets = [_token_offsets(mdc.IndexedDataset(prefix)) for prefix in prefixes]
    size = bench.scaled(6000, minimum=60)
    half = size // 2
    sizes = [size, 0, 0]
    progress(f"schedule: repeats over {size:,} samples, weights switched at {half:,}")
    stages_a = [(0, (prefixes, list(WEIGHTS_A)))]
    stages_b = stages_a + [(half, (prefixes, list(WEIGHTS_B)))]
    ours_a, ours_b = (
        mdc.build_datasets(_schedule_config(stages, None), sizes)[0]
        for stages in (stages_a, stages_b)
    )
    ours = _repeat_counts(ours_a, ours_b, half, size, offsets)
    theirs = ("n/a (megatron-core not installed)",) * 3
    if megatron is not None:
        blends = []
        for weights in (WEIGHTS_A, WEIGHTS_B):
            cache = tempfile.mkdtemp(prefix="megatron_", dir=bench.workdir)
            blends.append(megatron_build(megatron, (prefixes, list(weights)), sizes, cache)[0])
        theirs = _repeat_counts(blends[0], blends[1], half, size, offsets)
    what = f"{size:,}-sample run, switched at {half:,}: 2nd-half samples"
    bench.row(f"schedule: {what} with a token already trained on", "samples", "lower",
              ours[0], theirs[0], 1)
    bench.row("schedule: already-trained tokens served again in the 2nd half", "tokens",
              "lower", ours[1], theirs[1], 1)
    bench.row("schedule: member samples skipped (read past, never served)", "samples",
              "lower", ours[2], theirs[2], 1)
    bench.check("schedule: the edited schedule serves no token twice and skips none",
                ours[0] == 0 and ours[2] == 0)
    same_past = all(
        np.array_equal(ours_a.__getitems__(np.arange(half))[key],
                       ours_b.__getitems__(np.arange(half))[key])
        for key in ("tokens", "labels")
    )
    bench.check("schedule: samples [0, N/2) unchanged by the edit", same_past)
    _levanter_repeats(bench, size, half, ours, theirs, _stage_deviation(ours_b, half, size))


def _stage_deviation(blend, half: int, size: int) -> list[float]:
    """Per stage (A on [0, half), B on [half, size)): the largest |count_j - w_j m| over
    the stage's prefixes m."""
    index = np.asarray(blend.dataset_index)
    result = []
    for (lo, hi), weights in zip(((0, half), (half, size)), (WEIGHTS_A, WEIGHTS_B)):
        w = np.asarray(weights) / sum(weights)
        counts = np.cumsum(index[lo:hi, None] == np.arange(len(w))[None, :], axis=0)
        m = np.arange(1, hi - lo + 1)[:, None]
        result.append(float(np.abs(counts - w[None, :] * m).max()))
    return result


def _levanter_repeats(bench, size: int, half: int, ours: tuple, theirs: tuple,
                      deviation: list[float]) -> None:
    """Levanter's staged MixtureDataset on the same run, beside ours and Megatron's
    rebuild: notes, and checks of its own properties."""
    progress("schedule: Levanter's MixtureDataset with stages (overlay venv, child process)")
    lev = levanter_schedule(bench, size, half, NAMES, WEIGHTS_A, WEIGHTS_B)
    if isinstance(lev, str):
        bench.note(f"schedule: Levanter ({LEVANTER}): n/a ({lev})")
        bench.check("schedule: Levanter's staged mixture serves no (dataset, index) twice "
                    "and keeps its past when a stage is added", None)
        return
    block, switch = lev["block_size"], lev["switch"]
    megatron = theirs[0] if isinstance(theirs[0], str) else f"{theirs[0]:,}"
    full = (size // block) * block
    bench.note(
        f"schedule: Levanter (marin-levanter {lev['levanter']}, jax {lev['jax']}): "
        f"MixtureDataset, block_size {block:,}, stages [(0, A), ({switch:,}, B)] (a stage "
        f"starts on a block boundary; at {half:,} it is refused: {lev['unaligned'] or 'no'}),"
        f" in-memory (name, index) datasets: samples of [{switch:,}, "
        f"{size:,}) whose (dataset, index) [0, {switch:,}) already served: {lev['repeats']:,}"
        f" (ours {ours[0]:,}, megatron-core rebuild {megatron} at the token level); a "
        f"Levanter rebuild with B alone serves {lev['rebuild_repeats']:,} again"
    )
    if full == size:
        where = "the run ends on a block boundary"
    elif lev["skipped_full_blocks"] == 0:
        where = (f"none in its complete blocks [0, {full:,}): all are the unfinished block's "
                 f"[{full:,}, {size:,}), whose shuffle serves them by its end")
    else:
        where = f"{lev['skipped_full_blocks']:,} of them in its complete blocks [0, {full:,})"
    bench.note(
        f"schedule: Levanter: dataset indices skipped (below the furthest served, never "
        f"served) in [0, {size:,}): {lev['skipped']:,}, {where}; ours {ours[2]:,} (each "
        f"member read in its own order); datasets that would wrap: {lev['wrapped'] or 'none'}"
    )
    counts = lev["block_counts"]
    bench.note(
        "schedule: largest |count_j - w_j m| over prefixes m of a stage: Levanter "
        f"{lev['deviation'][0]:.1f} (A on [0, {switch:,})), {lev['deviation'][1]:.1f} (B on "
        f"[{switch:,}, {size:,})) samples: fixed counts per block of {block:,} (A "
        f"{counts[0]}, B {counts[1]}, the remainder of int(w * {block}) to the largest), "
        f"shuffled within the block; ours {deviation[0]:.2f} (A on [0, {half:,})), "
        f"{deviation[1]:.2f} (B on [{half:,}, {size:,}))"
    )
    bench.check("schedule: Levanter's staged mixture serves no (dataset, index) twice and "
                "keeps its past when a stage is added",
                lev["duplicates"] == 0 and lev["past_kept"],
                f"({lev['duplicates']} twice, past kept: {lev['past_kept']})")


def _renamed(prefix: str, name: str) -> str:
    target = os.path.join(os.path.dirname(prefix), name)
    for suffix in (".bin", ".idx"):
        os.replace(prefix + suffix, target + suffix)
    return target


def _schedule_config(stages, cache: str | None, split: str = "100,0,0"):
    import megadata_core as mdc

    return mdc.GPTDataConfig(
        random_seed=SEED, sequence_length=SEQUENCE, blend_schedule=stages, split=split,
        path_to_cache=cache, eod_id=0, create_attention_mask=False,
    )


# -- speed against a static blend ----------------------------------------------------------


def _stages(prefixes: list[str], weights: list[float], size: int, rng) -> list:
    starts = [size * k // STAGES for k in range(STAGES)]
    base = np.asarray(weights)
    return [
        (start, (prefixes, (base * rng.lognormal(0.0, 0.5, len(base))).tolist()))
        for start in starts
    ]


def _read(dataset, batches: np.ndarray) -> None:
    for batch in batches:
        dataset.__getitems__(batch)


def _speed(bench) -> None:
    import megadata_core as mdc

    count = bench.scaled(1000, minimum=2)
    blend, sizes, _ = many_prefix_blend(bench, count, "schedule")
    prefixes, weights = blend
    size = sizes[0]
    stages = _stages(prefixes, weights, size, np.random.default_rng(bench.seed))
    sides = {
        "ours": lambda cache: mdc.build_datasets(_schedule_config(stages, cache, SPLIT), sizes),
        "static": lambda cache: ours_build(blend, sizes, cache, blend_order="balanced"),
    }
    for side in sides:  # one-time costs outside the timings
        cache = tempfile.mkdtemp(prefix=f"warmup_{side}_", dir=bench.workdir)
        sides[side](cache)
        shutil.rmtree(cache, ignore_errors=True)
    times = {kind: {side: [] for side in sides} for kind in GOALS}
    built = {}
    for repeat in range(bench.repeats):
        order = sides if repeat % 2 == 0 else list(reversed(sides))
        caches = {}
        for side in order:
            progress(f"schedule: {side} cold build {repeat + 1}/{bench.repeats}")
            caches[side] = tempfile.mkdtemp(prefix=f"cache_{side}_", dir=bench.workdir)
            seconds, built[side] = measure(lambda s=side, c=caches[side]: sides[s](c))
            times["cold"][side].append(seconds)
        # reads interleaved in slices, side against side, so a noisy neighbour's burst
        # lands on both alike
        batches = np.random.default_rng(repeat).integers(0, min(len(b[0]) for b in built.values()),
                                                         (BATCHES, BATCH))
        read = dict.fromkeys(sides, 0.0)
        for side in order:
            _read(built[side][0], batches[:5])  # first touches outside the timing
        for chunk in np.array_split(batches, READ_SLICES):
            for side in order:
                read[side] += measure(lambda t=built[side][0], b=chunk: _read(t, b))[0]
        for side in sides:
            times["read"][side].append(read[side])
            shutil.rmtree(caches[side], ignore_errors=True)
    label = f"{count:,} prefixes, {size:,} samples"
    bench.row(f"schedule: build_datasets cold, {STAGES} stages vs static blend, {label}", "s",
              "lower", median(times["cold"]["ours"]), median(times["cold"]["static"]),
              bench.repeats)
    bench.row(f"schedule: {BATCHES} random batches of {BATCH} (__getitems__), {label}", "s",
              "lower", median(times["read"]["ours"]), median(times["read"]["static"]),
              bench.repeats)
    passes = sum(len(member.passes) for member in built["ours"][0].datasets)
    bench.note(f"schedule: the schedule's train split holds {passes:,} passes over "
               f"{count:,} prefixes")
    for kind, goal in GOALS.items():
        a, b = median(times[kind]["ours"]), median(times[kind]["static"])
        if a is not None and b:
            verdict = "met" if a / b <= goal else "not met"
            bench.note(f"schedule: {kind}: schedule {a:.3f} s, static blend {b:.3f} s, ratio "
                       f"{a / b:.3f} (goal <= {goal:.3g}x: {verdict})")
    _levanter_speed(bench, stages, size, median(times["cold"]["ours"]),
                    median(times["read"]["ours"]))


def _levanter_speed(bench, stages: list, size: int, cold: float | None,
                    read: float | None) -> None:
    """Levanter's MixtureDataset with the same stages over as many index-only datasets:
    its construction and the same number of random batches (index mapping alone)."""
    progress("schedule: Levanter's MixtureDataset with the same stages (child process)")
    weights = np.asarray([stage_weights for _, (_, stage_weights) in stages])
    batches = np.random.default_rng(0).integers(0, size, (BATCHES, BATCH))
    lev = levanter_many(bench, weights, [start for start, _ in stages], size, batches)
    if isinstance(lev, str):
        bench.note(f"schedule: Levanter ({LEVANTER}) with {STAGES} stages: n/a ({lev})")
        return
    ours = (f"; ours (tokens read too): build_datasets cold {cold:.3f} s, reads {read:.3f} s"
            if cold is not None and read is not None else "")
    bench.note(
        f"schedule: Levanter MixtureDataset, the same {STAGES}-stage weights over "
        f"{lev['datasets']:,} index-only datasets (starts rounded to its blocks: "
        f"{lev['stages']} stages), {size:,} samples: construction {lev['build_s']:.3f} s, "
        f"{BATCHES} random batches of {BATCH} {lev['read_s']:.3f} s (a "
        f"jax.random.permutation per block touched, 32 blocks cached), {lev['in_order']} in "
        f"order from sample 0 (as its loader reads) {lev['in_order_s']:.3f} s: index mapping "
        f"only{ours}"
    )


def suite_schedule(bench) -> None:
    """Repeats against a Megatron rebuild; cold build and reads against a static blend."""
    if bench.wants("repeats"):
        _repeats(bench)
    if bench.wants("cold") or bench.wants("read"):
        _speed(bench)
