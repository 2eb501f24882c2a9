"""Blending indices: for blended sample i, which dataset it reads and which of its samples.

Every function returns ``(dataset_index, dataset_sample_index)``: ``dataset_index`` int16
[size] (int32 past 32767 datasets), ``dataset_sample_index`` int64 [size], where
``dataset_sample_index[i]`` counts the earlier samples from the same dataset (each
dataset's samples are read in order, 0, 1, 2, ...).

* :func:`megatron_blending_indices`: megatron-core 0.16.1's
  ``helpers.build_blending_indices``, value for value: step i picks
  ``argmax_j w_j * max(i, 1) - c_j`` in IEEE double (ties to the lowest j). Its prefix
  counts stray up to about 2 samples from ``w_j * i`` with skewed weights.
* :func:`megatron_exhaustive_blending_indices`: ``build_exhaustive_blending_indices``
  (exactly ``sizes[j]`` samples of dataset j, same rule, spent datasets skipped).
* :func:`balanced_blending_indices` (our default order): every prefix of length m holds
  ``|c_j - p_j m| <= balanced_bound(w) < 1`` samples of dataset j, ``p_j = w_j / sum(w)``
  over the n datasets with weight > 0; zero-weight datasets are never picked (nor those
  below 2**-100 of the total, which no blend of < 2**52 samples could reach). It is one
  of three rules, chosen by the weights alone (never by the size below 2**46 samples, so
  a longer blend starts with the shorter one):

  - rates that are fractions ``a_j / P`` with a period ``P <= 2**20`` (to within 2**-50:
    decimal weights such as 0.4/0.3/0.2/0.1, small integers) use those exact fractions
    and earliest deadline first (EDF) with Tijdeman's bound ``D = 1 - 1 / (2n - 2)``
    (1/2 for two datasets): after P steps every count is exactly ``a_j`` (the bound is
    < 1), so one period is computed and repeated, with ``dataset_sample_index`` growing
    by ``a_j`` per period; against the caller's float rates the bound holds to within
    ``m * 2**-50``;
  - other rates, where a binary tree of two-way splits has a bound ``<= 1 - 2**-10``
    (most weights of up to 6 datasets): each node hands its samples to its children by
    a Beatty sequence (:mod:`megadata_core.indices._blend_tree`), to within
    ``m * 2**-43`` of that bound against the caller's rates;
  - the rest: EDF run step by step (:mod:`megadata_core.indices._blend_rules`), bound D.

* :func:`balanced_blending_stages`: the balanced orders of S blends one after the other
  (a blend schedule's stages), each the one above, value for value; the EDF stages run
  side by side in one engine pass, so 20 stages cost about one static blend of their
  total size (not 20 engine runs).

Why not a sort of the ideal positions ``(k + 1/2) / w_j``? Such a merge of arithmetic
progressions drifts: with one dataset of weight 0.5 and fifty of weight 0.01, the first
49 samples all come from the big one (12.5 more than its share), and 4 random weights
already reach 1.3. Keeping every dataset within one sample of its share in every prefix
is the "chairman assignment" problem (Tijdeman 1980); EDF decides step by step, and a
tree of two-way splits (each exactly within 1/2) composes to within 1 when its shape
keeps small datasets away from deep, lopsided splits.

The Megatron orders and EDF are sequential by definition; they are computed exactly,
vectorized, by :mod:`megadata_core.indices._blend_engine` (many segments of the order
run side by side, each checked to start where the previous one ends). A periodic order
is a copy of one period; the split tree writes each sample once from closed-form
positions. Their speed beside megatron-core's C++ loop: docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

from megadata_core.checks import check_int, check_lengths
from megadata_core.errors import DataError
from megadata_core.indices import _blend_engine as engine
from megadata_core.indices import _blend_rules as rules
from megadata_core.indices import _blend_tree as trees

__all__ = [
    "balanced_blending_indices",
    "balanced_blending_stages",
    "balanced_bound",
    "blend_counts",
    "check_weights",
    "dataset_index_dtype",
    "megatron_blending_indices",
    "megatron_exhaustive_blending_indices",
    "megatron_normalize",
    "prefix_deviation",
]


def check_weights(weights: object, field: str = "weights") -> np.ndarray:
    """float64 [n] weights: a non-empty 1-D sequence of finite numbers >= 0, not all 0.

    Raises:
        DataError: naming ``field`` and the offending weight.
    """
    try:
        values = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(f"{field}: {weights!r} are not numbers") from None
    if values.ndim != 1 or values.size == 0:
        raise DataError(f"{field}: expected a non-empty 1-D sequence, got shape {values.shape}")
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
    if bad.size:
        j = int(bad[0])
        raise DataError(
            f"{field}: weight {j} is {float(values[j])!r}; weights must be finite and >= 0"
        )
    if not values.any():
        raise DataError(f"{field}: every weight is 0")
    return values


def dataset_index_dtype(datasets: int) -> np.dtype:
    """The dtype of a ``dataset_index`` over ``datasets`` datasets: int16 up to 32,767
    (Megatron's), int32 past it."""
    return engine.dataset_dtype(datasets)


def megatron_normalize(weights: object) -> np.ndarray:
    """float64 [n]: Megatron's ``normalize`` (float64 array divided by ``numpy.sum``), the
    weights its BlendedDataset hands to ``build_blending_indices``."""
    values = check_weights(weights)
    return values / np.sum(values)


def _size(size: object) -> int:
    number = check_int("size", size, 0)
    if number >= 1 << 52:
        raise DataError(f"size: {number} must be < 2**52")
    return number


def megatron_blending_indices(
    weights: object, size: int, *, normalize: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """megatron-core's ``build_blending_indices(weights, size)``, value for value.

    Args:
        weights: float [n], finite, >= 0, not all 0.
        size: samples in the blend (>= 0).
        normalize: divide the weights by their sum first, as Megatron's BlendedDataset
            does before it calls the helper (False: the helper on the raw weights).

    Returns:
        ``(dataset_index int16 [size], dataset_sample_index int64 [size])``.

    A zero weight is still picked on ties (as in Megatron, which forbids zero weights in
    its BlendedDataset); :class:`~megadata_core.BlendedDataset` drops such datasets.
    """
    values = megatron_normalize(weights) if normalize else check_weights(weights)
    size = _size(size)
    return engine.run("megatron", values, size, None, engine.dataset_dtype(len(values)))


def megatron_exhaustive_blending_indices(sizes: object) -> tuple[np.ndarray, np.ndarray]:
    """megatron-core's ``build_exhaustive_blending_indices(sizes)``, value for value.

    Args:
        sizes: int [n] >= 0: exactly ``sizes[j]`` samples of dataset j are drawn,
            ``sum(sizes)`` in all, in the megatron order with weights ``sizes / sum``.

    Returns:
        ``(dataset_index int16 [sum], dataset_sample_index int64 [sum])``.

    A size of 0 is never picked (Megatron's helper loops past its buffers then).
    """
    counts = _sizes(sizes)
    total = int(counts.sum())
    index_dtype = engine.dataset_dtype(len(counts))
    if total == 0:
        return np.empty(0, index_dtype), np.empty(0, np.int64)
    weights = counts.astype(np.float64) / float(total)  # as the C++: size / double(total)
    return engine.run("megatron", weights, total, counts, index_dtype)


def _sizes(sizes: object, field: str = "sizes") -> np.ndarray:
    try:
        values = np.asarray(sizes)
    except (TypeError, ValueError):
        raise DataError(f"{field}: {sizes!r} are not integers") from None
    if values.ndim != 1 or values.size == 0:
        raise DataError(f"{field}: expected a non-empty 1-D sequence, got shape {values.shape}")
    if values.dtype.kind == "f":
        if not np.all(np.isfinite(values)) or np.any(values != np.floor(values)):
            raise DataError(f"{field}: {values.tolist()!r} are not integers")
    elif values.dtype.kind not in "iu":
        raise DataError(f"{field}: {sizes!r} are not integers")
    if np.any(values < 0):
        raise DataError(f"{field}: {values.tolist()!r} must be >= 0")
    if values.size and float(values.max()) >= 2**52:
        raise DataError(f"{field}: {values.tolist()!r} must be < 2**52")
    return values.astype(np.int64)


def balanced_blending_indices(
    weights: object, size: int | None = None, *, caps: object = None
) -> tuple[np.ndarray, np.ndarray]:
    """The balanced order (see the module docstring): ``|c_j - p_j m| <= balanced_bound(w)
    < 1`` for every prefix length m and dataset j, ``p_j = w_j / sum(w)``.

    Args:
        weights: float [n], finite, >= 0, not all 0 (zero weights are never picked).
        size: samples in the blend (>= 0); None with ``caps``: ``sum(caps)``.
        caps: optional int [n]: dataset j is never picked more than ``caps[j]`` times.
            With ``weights = caps`` and ``size = sum(caps)`` (the exhaustive blend) the
            bound keeps every count below its cap, so each dataset gives exactly its
            cap; caps that bind otherwise void the bound.

    Returns:
        ``(dataset_index int16 [size], dataset_sample_index int64 [size])``.
    """
    values = check_weights(weights)
    limits = None if caps is None else _sizes(caps, "caps")
    if limits is not None and len(limits) != len(values):
        raise DataError(f"caps: {len(limits)} caps for {len(values)} weights")
    if size is None:
        if limits is None:
            raise DataError("size: None needs caps (the exhaustive blend)")
        size = int(limits.sum())
    size = _size(size)
    if limits is not None and size > int(limits[values > 0].sum()):
        raise DataError(
            f"size: {size} exceeds the caps of the datasets with weight > 0 "
            f"({int(limits[values > 0].sum())})"
        )
    index_dtype = engine.dataset_dtype(len(values))
    live, rates, period = _balanced_rates(values)
    limits = None if limits is None else limits[live]
    done = _closed_form(values, live, rates, period, size, limits, index_dtype)
    if done is not None:
        return done
    index, sample = engine.run("edf", rates, size, limits, index_dtype)
    if len(live) < len(values):  # map back to the caller's dataset ids
        index = live.astype(index_dtype)[index]
    return index, sample


def _closed_form(
    values: np.ndarray,
    live: np.ndarray,
    rates: np.ndarray,
    period: np.ndarray | None,
    size: int,
    limits: np.ndarray | None,
    index_dtype: np.dtype,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """The balanced order where a period or a split tree gives it (written into ``out``
    when given); None where the EDF rule runs step by step (over ``rates``, the
    ``live`` datasets' ones)."""
    if period is not None and size > period.sum():
        tiled = _tiled(live, rates, period, size, limits, index_dtype, out)
        if tiled is not None:
            return tiled
    tree = _split_tree(live, rates, period)
    if tree is not None and size < trees.MAX_SIZE:
        index, sample = trees.tree_order(tree[0], size, index_dtype, out=out)
        if limits is None or np.all(np.bincount(index, minlength=len(values))[live] <= limits):
            return index, sample
        # caps that bind: the sequential rule, which skips spent datasets
    return None


def balanced_blending_stages(weights: object, lengths: object) -> tuple[np.ndarray, np.ndarray]:
    """The balanced orders of S blends, one after the other (a blend schedule's stages).

    Args:
        weights: float [S, n]: stage s's weights (each row finite, >= 0, not all 0).
        lengths: int [S] >= 0: samples of each stage.

    Returns:
        ``(dataset_index [sum(lengths)], dataset_sample_index int64 [sum(lengths)])``,
        ``dataset_index`` of :func:`dataset_index_dtype` (n): the concatenation over s of
        ``balanced_blending_indices(weights[s], lengths[s])``, value for value (each
        stage counts its samples from 0).

    Stages with a period or a split tree are computed as there (a copy, closed form);
    the EDF stages run side by side in one vectorized pass
    (:func:`~megadata_core.indices._blend_engine.run_stages`), which costs about what
    one blend of their total size does instead of ~burn + segment Python steps each.

    Raises:
        DataError: naming ``weights`` (its shape, or the stage and weight) or
            ``lengths`` (its shape, a negative or too large length).
    """
    rows, sizes = _check_stages(weights, lengths)
    index_dtype = engine.dataset_dtype(rows.shape[1])
    places = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    # closed forms write here; untouched (never paged in) when every stage is EDF
    out_index = np.empty(places[-1], dtype=index_dtype)
    out_sample = np.empty(places[-1], dtype=np.int64)
    lives, tables = {}, []
    for k in np.flatnonzero(sizes).tolist():  # one vectorized order (or plan) per stage
        live, rates, period = _balanced_rates(rows[k])
        out = out_index[places[k] : places[k + 1]], out_sample[places[k] : places[k + 1]]
        if _closed_form(rows[k], live, rates, period, int(sizes[k]), None, index_dtype, out):
            continue
        lives[k] = live
        tables.append(rates)
    if not lives:
        return out_index, out_sample
    table = np.zeros((len(tables), max(len(rates) for rates in tables)))
    for row, rates in enumerate(tables):  # each stage's live datasets, in order
        table[row, : len(rates)] = rates
    stages = list(lives)
    index, sample = engine.run_stages("edf", table, sizes[stages], index_dtype)
    alone = len(stages) == np.count_nonzero(sizes)  # no closed form: the result as it is
    begin = 0
    for k in stages:  # back to the caller's dataset ids
        live, end = lives[k], begin + int(sizes[k])
        if len(live) < rows.shape[1]:
            index[begin:end] = live.astype(index_dtype)[index[begin:end]]
        if not alone:
            out_index[places[k] : places[k + 1]] = index[begin:end]
            out_sample[places[k] : places[k + 1]] = sample[begin:end]
        begin = end
    return (index, sample) if alone else (out_index, out_sample)


def _check_stages(weights: object, lengths: object) -> tuple[np.ndarray, np.ndarray]:
    """``(weights float64 [S, n], lengths int64 [S])`` of :func:`balanced_blending_stages`,
    checked."""
    try:
        rows = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(f"weights: {weights!r} are not numbers") from None
    if rows.ndim != 2 or rows.shape[1] == 0:
        raise DataError(f"weights: expected [stages, datasets], got shape {rows.shape}")
    bad = ~(np.isfinite(rows) & (rows >= 0)).all(axis=1) | ~rows.any(axis=1)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        check_weights(rows[k], f"weights[{k}]")  # raises, naming the weight
    sizes = check_lengths("lengths", lengths).astype(np.int64)
    if sizes.shape != (rows.shape[0],):
        raise DataError(f"lengths: {sizes.shape[0]} lengths for {rows.shape[0]} stages of weights")
    if sizes.size and int(sizes.max()) >= 1 << 52:
        raise DataError(f"lengths: {int(sizes.max())} must be < 2**52")
    return rows, sizes


def _balanced_rates(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(ids, rates, period counts or None) of the balanced order: with a period
    (:func:`~megadata_core.indices._blend_rules.period_counts`) the rates are ``a / P``."""
    live, rates = _live_rates(values)
    period = rules.period_counts(rates)
    if period is not None:
        rates = period / float(period.sum())
    return live, rates, period


def _split_tree(live: np.ndarray, rates: np.ndarray, period: np.ndarray | None):
    """(tree, bound) of the split-tree order for rates without a period, else None
    (periodic rates, or no tree within the bound: the EDF rule)."""
    if period is not None:
        return None
    return trees.split_tree(live, rates)


def _tiled(
    live: np.ndarray,
    rates: np.ndarray,
    period: np.ndarray,
    size: int,
    limits: np.ndarray | None,
    index_dtype: np.dtype,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """The balanced order of a periodic blend: one period of the rule, repeated (into
    ``out`` when given); None where caps would bind (then the rule runs to the end,
    skipping spent datasets)."""
    length = int(period.sum())
    word, samples = engine.run("edf", rates, length, None, index_dtype)
    if not np.array_equal(np.bincount(word, minlength=len(period)), period):
        return None  # float rounding broke the period (never seen): run the rule instead
    if limits is not None:
        rounds, rest = divmod(size, length)
        final = rounds * period + np.bincount(word[:rest], minlength=len(period))
        if np.any(final > limits):
            return None
    return engine.tile(live.astype(index_dtype)[word], samples, period[word], size, out)


def _live_rates(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ids, rates) of the datasets the balanced order reads: weight > 0 and at least
    ``MIN_RATE`` (2**-100) of the total, which no order of < 2**52 samples could read;
    the rates sum to 1."""
    live = np.flatnonzero(values > 0)
    rates = values[live] / np.sum(values[live])
    keep = rates >= rules.MIN_RATE
    if not keep.all():
        live, rates = live[keep], rates[keep] / np.sum(rates[keep])
    return live, rates


def balanced_bound(weights: object) -> float:
    """The balanced order's guaranteed bound on ``|c_j(m) - p_j m|`` (< 1): the split
    tree's where one is used (plus ``m * 2**-43`` for its quantized shares), else
    Tijdeman's ``1 - 1 / (2n - 2)`` for the n datasets it reads (0 for one dataset)."""
    live, rates, period = _balanced_rates(check_weights(weights))
    tree = _split_tree(live, rates, period)
    return rules.edf_bound(len(live)) if tree is None else tree[1]


def blend_counts(dataset_index: np.ndarray, datasets: int) -> np.ndarray:
    """int64 [datasets]: how many samples the blend reads from each dataset."""
    return np.bincount(np.asarray(dataset_index), minlength=datasets).astype(np.int64)


def prefix_deviation(dataset_index: np.ndarray, weights: object, chunk: int = 1 << 20) -> float:
    """max over prefix lengths m and datasets j of ``|c_j(m) - p_j m|`` (p = weights / sum):
    the balance of an order (a check for tests and benchmarks; O(size * n), in chunks)."""
    rates = megatron_normalize(weights)
    index = np.asarray(dataset_index)
    counts = np.zeros(len(rates), dtype=np.int64)
    worst = 0.0
    for start in range(0, len(index), chunk):
        piece = index[start : start + chunk]
        steps = np.arange(start + 1, start + len(piece) + 1, dtype=np.float64)
        for j, rate in enumerate(rates):
            running = np.cumsum(piece == j, dtype=np.int64)
            running += counts[j]
            worst = max(worst, float(np.max(np.abs(running - rate * steps))))
            counts[j] = running[-1]
    return worst


@contextlib.contextmanager
def blend_threads(count: int | None) -> Iterator[None]:
    """Within the block, the balanced blend of weights without a period runs its passes
    on at most ``count`` threads (None: its default, the usable cores up to 4); for
    benchmarks that compare one thread with several. Not thread-safe."""
    default = trees.MAX_THREADS
    trees.MAX_THREADS = default if count is None else max(1, int(count))
    try:
        yield
    finally:
        trees.MAX_THREADS = default
