"""The ``thd`` item of the ``packing`` suite: the padding that context parallelism's THD
layout costs (``packing_alignment = 2 * cp_size``), for cp 1, 2, 4, 8.

On the same documents (the ``padding`` item's: the demo corpus and the long-tail
lognormal lengths), in the same shuffled order, S = 4096:

* ours aligned: ``best_fit`` with ``packing_alignment`` (documents cut into S-token
  pieces, each piece placed by its length rounded up to a multiple of 2 cp; S tokens a
  sample);
* ours unaligned: ``best_fit`` without alignment (C = S + 1 tokens a sample);
* Megatron's rule (its sequence-packing scheduler, ``DpBalancedScheduler`` with
  ``--pad-packed-seq-alignment``): per global batch of sequences, each padded to a
  multiple of 2 cp, packed in their order while they fit (next fit) into S tokens per
  packed sequence, each packed sequence padded to S ("max": fixed shapes, as ours). The
  documents, cut into the same S-token pieces, are its sequences, ``GLOBAL_BATCH`` a
  global batch.

Padding = 1 - real tokens / (samples x tokens a sample).
"""

from __future__ import annotations

import numpy as np

SEQUENCE = 4096
CP_SIZES = (1, 2, 4, 8)
GLOBAL_BATCH = 512  # sequences Megatron's scheduler packs at once (a global batch)


def _pieces(lengths: np.ndarray, order: np.ndarray, size: int) -> np.ndarray:
    """int64: the documents in ``order`` cut into ``size``-token pieces and a rest."""
    ordered = lengths[order]
    full = ordered // size
    rest = ordered % size
    counts = full + (rest > 0)
    pieces = np.full(int(counts.sum()), size, dtype=np.int64)
    last = np.cumsum(counts) - 1
    has_rest = rest > 0
    pieces[last[has_rest]] = rest[has_rest]
    return pieces


def aligned_best_fit(lengths: np.ndarray, order: np.ndarray, alignment: int | None) -> dict:
    """Our best_fit samples (aligned or not): samples and padding fraction."""
    from megadata_core.indices.packed_samples import packing_units
    from megadata_core.indices.packing import best_fit_pack

    capacity, units, unit_capacity = packing_units(lengths, SEQUENCE, True, alignment)
    bins = best_fit_pack(units, unit_capacity, order).num_bins
    return {"samples": bins, "padding": 1 - int(lengths.sum()) / (bins * capacity)}


def megatron_next_fit(lengths: np.ndarray, order: np.ndarray, alignment: int) -> dict:
    """Megatron's per-global-batch rule: next fit of the aligned pieces, in order."""
    padded = -(-_pieces(lengths, order, SEQUENCE) // alignment) * alignment
    bins = 0
    for lo in range(0, len(padded), GLOBAL_BATCH):  # a peer's sequential rule, per batch
        used = SEQUENCE + 1  # forces a new packed sequence at the batch's start
        for size in padded[lo : lo + GLOBAL_BATCH].tolist():
            if used + size > SEQUENCE:
                bins += 1
                used = 0
            used += size
    return {"samples": bins, "padding": 1 - int(lengths.sum()) / (bins * SEQUENCE)}


def item_thd(bench, corpora: dict[str, np.ndarray], rng: np.random.Generator) -> None:
    """Rows: padding of ours aligned vs ours unaligned and vs Megatron's rule, per cp."""
    for name, lengths in corpora.items():
        order = rng.permutation(len(lengths))
        label = f"{name}, {len(lengths) / 1e3:g}k docs"
        loose = aligned_best_fit(lengths, order, None)
        for cp in CP_SIZES:
            alignment = 2 * cp
            ours = aligned_best_fit(lengths, order, alignment)
            theirs = megatron_next_fit(lengths, order, alignment)
            bench.row(f"THD padding, {label}, cp {cp} (alignment {alignment}), peer = "
                      "ours unaligned", "%", "lower",
                      100 * ours["padding"], 100 * loose["padding"], 1)
            bench.row(f"THD padding, {label}, cp {cp} (alignment {alignment}), peer = "
                      "Megatron's per-batch rule", "%", "lower",
                      100 * ours["padding"], 100 * theirs["padding"], 1)
            bench.check(
                f"THD padding, {name}, cp {cp}: ours <= Megatron's per-batch rule",
                ours["padding"] <= theirs["padding"],
                f"({100 * ours['padding']:.3f}% vs {100 * theirs['padding']:.3f}%)",
            )
            bench.note(
                f"thd, {name}, cp {cp}: samples ours aligned {ours['samples']:,}, unaligned "
                f"{loose['samples']:,}, Megatron's rule {theirs['samples']:,}"
            )
    bench.note(
        f"thd: S = {SEQUENCE}; ours aligned holds S tokens a sample (the extra label token "
        "is padding), unaligned S + 1; Megatron's rule: next fit in order per global batch "
        f"of {GLOBAL_BATCH} sequences (the documents cut into S-token pieces), every "
        "sequence padded to a multiple of 2 cp, every packed sequence to S."
    )
