"""The figures of tools/inspect_data.py (matplotlib, Agg backend, PNG files).

Each function draws arrays that the core computed (``megadata_core.datasets.inspection``)
and returns a Figure; :func:`save` writes it whole or not at all
(:func:`megadata_core.files.atomic.write_atomically`).
"""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from megadata_core.files.atomic import write_atomically  # noqa: E402

COLORS = plt.get_cmap("tab10").colors


def save(figure: Figure, path: str) -> str:
    """Write ``figure`` as a PNG at ``path`` (atomically); returns the path."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        write_atomically(path, lambda stream: figure.savefig(stream, format="png", dpi=90))
    finally:
        plt.close(figure)
    return path


def _short(name: str, width: int = 40) -> str:
    name = os.path.basename(name) or name
    return name if len(name) <= width else "..." + name[-(width - 3) :]


def corpus_figure(
    name: str, lengths: np.ndarray, first: np.ndarray, mean: np.ndarray, largest: np.ndarray
) -> Figure:
    """Document lengths: a histogram (log x) and tokens per document along the file."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    positive = lengths[lengths > 0]
    if positive.size:
        low, high = int(positive.min()), int(positive.max())
        edges = np.geomspace(low, max(low + 1, high) * 1.01, 50)
        left.hist(positive, bins=edges, color=COLORS[0])
    left.set_xscale("log")
    left.set_xlabel("tokens per document (log)")
    left.set_ylabel("documents")
    empty = int(lengths.size - positive.size)
    left.set_title(f"{len(lengths):,} documents" + (f" ({empty:,} empty)" if empty else ""))
    if len(lengths) <= 20_000:
        right.scatter(np.arange(len(lengths)), lengths, s=5, alpha=0.5, color=COLORS[0],
                      label="document", linewidths=0)
    else:
        right.plot(first, largest, color=COLORS[0], alpha=0.4, lw=0.8, label="largest in bin")
    right.plot(first, mean, color=COLORS[1], lw=1.6, label="mean of bin")
    right.set_yscale("symlog", linthresh=1)
    right.set_xlabel("document position in the file")
    right.set_ylabel("tokens")
    right.set_title("tokens per document along the file")
    right.legend(loc="upper right", fontsize=8)
    figure.suptitle(_short(name, 80))
    return figure


def shares_figure(
    split: str,
    names: list[str],
    weights: np.ndarray,
    steps: np.ndarray,
    counts: dict[str, np.ndarray],
    batch_size: int,
) -> Figure:
    """Per blend order (one line style each): every dataset's share of the samples
    consumed so far against its weight (left), and the largest distance so far of its
    count from weight x samples, in samples (right; under 1: every prefix within one
    sample of its share)."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4), layout="constrained")
    styles = ["-", "--", ":"]
    for style, (order, table) in zip(styles, counts.items()):
        distance = np.maximum.accumulate(np.abs(table - weights * steps[:, None]), axis=0)
        for j, name in enumerate(names):
            color = COLORS[j % len(COLORS)]
            label = f"{_short(name, 28)} ({order})"
            left.plot(steps, table[:, j] / steps, style, color=color, lw=1.3, label=label)
            right.plot(steps, distance[:, j], style, color=color, lw=1.5, label=label)
    for j, weight in enumerate(weights):
        left.axhline(weight, color=COLORS[j % len(COLORS)], lw=0.8, alpha=0.5)
    right.axhline(1.0, color="0.4", lw=0.8, ls=":")
    right.set_ylim(0, max(1.2, right.get_ylim()[1]))
    for axis in (left, right):
        axis.set_xscale("log")
        axis.set_xlabel("samples consumed (log)")
        top = axis.secondary_xaxis(
            "top", functions=(lambda x: x / batch_size, lambda x: x * batch_size)
        )
        top.set_xlabel(f"training step ({batch_size} samples each)", fontsize=8)
    left.set_ylabel("share of the samples so far")
    left.set_title(f"{split}: realized share (lines) vs weight (thin)", fontsize=10)
    right.set_ylabel("largest |count - weight x samples| so far")
    right.set_title(f"{split}: distance from the exact share, in samples", fontsize=10)
    left.legend(fontsize=7, loc="upper right")
    right.legend(fontsize=7, loc="upper left")
    return figure


def schedule_figure(
    split: str,
    names: list[str],
    steps: np.ndarray,
    requested: np.ndarray,
    realized: np.ndarray,
    distance: np.ndarray,
    starts: np.ndarray,
    batch_size: int,
) -> Figure:
    """A blend schedule: every dataset's requested share (its stage's weight, thin steps)
    and realized share of the stage's samples so far (left), and the largest distance so
    far of its count from weight x samples within the stage, in samples (right; under 1:
    every prefix of every stage within one sample of its share). Stage starts are dotted
    lines."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4), layout="constrained")
    stage = np.searchsorted(np.asarray(starts), steps - 1, side="right") - 1
    largest = distance.copy()  # the largest distance so far within each stage
    for k in np.unique(stage):
        rows = stage == k
        largest[rows] = np.maximum.accumulate(distance[rows], axis=0)
    distance = largest
    for j, name in enumerate(names):
        color = COLORS[j % len(COLORS)]
        left.plot(steps, requested[:, j], color=color, lw=0.9, alpha=0.6, drawstyle="steps-pre")
        left.plot(steps, realized[:, j], color=color, lw=1.4, label=_short(name, 32))
        right.plot(steps, distance[:, j], color=color, lw=1.2, label=_short(name, 32))
    for start in np.asarray(starts)[1:]:
        if start <= steps[-1]:
            for axis in (left, right):
                axis.axvline(start, color="0.5", lw=0.8, ls=":")
    right.axhline(1.0, color="0.4", lw=0.8, ls="--")
    right.set_ylim(0, max(1.2, right.get_ylim()[1]))
    for axis in (left, right):
        axis.set_xlabel("samples consumed")
        top = axis.secondary_xaxis(
            "top", functions=(lambda x: x / batch_size, lambda x: x * batch_size)
        )
        top.set_xlabel(f"training step ({batch_size} samples each)", fontsize=8)
    left.set_ylim(-0.02, 1.02)
    left.set_ylabel("share")
    left.set_title(f"{split}: requested (thin) vs realized share in each stage", fontsize=10)
    right.set_ylabel("largest |count - weight x samples| in the stage")
    right.set_title(f"{split}: distance from the stage's exact share, in samples", fontsize=10)
    left.legend(fontsize=7, loc="upper right")
    return figure


def order_figure(
    split: str, names: list[str], regions: np.ndarray, batch_size: int
) -> Figure:
    """A heatmap per dataset: samples of each global batch (x) that start in each region
    of that dataset's corpus (y, position in the file)."""
    count = len(names)
    figure, axes = plt.subplots(
        count, 1, figsize=(11, 1.2 + 2.2 * count), layout="constrained", squeeze=False
    )
    batches = regions.shape[2]
    for j, (axis, name) in enumerate(zip(axes[:, 0], names)):
        image = axis.imshow(
            regions[j], aspect="auto", origin="lower", interpolation="nearest", cmap="viridis",
            extent=(-0.5, batches - 0.5, 0, 100),
        )
        axis.set_ylabel("position in corpus (%)")
        axis.set_title(
            f"{_short(name, 60)}: {int(regions[j].sum()):,} samples", fontsize=9
        )
        figure.colorbar(image, ax=axis, label="samples", pad=0.01)
    axes[-1, 0].set_xlabel(f"global batch ({batch_size} samples each)")
    figure.suptitle(f"{split}: where the first {batches} global batches read")
    return figure
