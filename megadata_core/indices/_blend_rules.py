"""The two sequential blending rules, vectorized over K independent runs and in plain
Python (private to ``blending``; run by :mod:`megadata_core.indices._blend_engine`).

``c_j`` is the number of samples taken from dataset j before step t; ties go to the
lowest j; all arithmetic is IEEE double, the same operations in the vectorized and the
plain-Python form (and, for ``megatron``, as megatron-core's ``helpers.cpp``).

* ``megatron``: ``argmax_j w_j * max(t, 1) - c_j`` (``build_blending_indices``); with
  caps, datasets whose count reached their cap are skipped
  (``build_exhaustive_blending_indices``).
* ``edf``: earliest deadline first with bound ``D`` (``slack = 1 - D``): dataset j may
  take step t when ``(c_j + slack) / p_j <= t + 1`` (then ``c_j + 1 <= p_j (t + 1) + D``)
  and the one with the smallest deadline ``(c_j + D) / p_j`` does (after it,
  ``c_j(m) >= p_j m - D`` would fail). EDF is optimal for unit jobs with release times
  and deadlines, and Tijdeman (1980, the "chairman assignment problem") shows a sequence
  with ``|c_j(m) - p_j m| <= 1 - 1 / (2n - 2)`` exists for any n >= 2 rates, so with that
  D no deadline is ever missed. (D = 1 is Balinski and Young's quota method.)
"""

from __future__ import annotations

import math

import numpy as np


def edf_bound(datasets: int) -> float:
    """Tijdeman's bound ``1 - 1 / (2n - 2)`` for n >= 2 datasets (1/2 for two)."""
    return 1.0 - 1.0 / (2 * datasets - 2) if datasets >= 2 else 0.0


def apportion(rates: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """int64 [n, K]: the largest-remainder apportionment of ``steps[k]`` samples (int64
    [K]) by ``rates`` (float64 [n], sum 1); ties to the lowest dataset (a guess of the
    counts at a step: any guess is corrected by the engine)."""
    quotas = rates[:, None] * steps[None, :].astype(np.float64)
    floors = np.floor(quotas)
    order = np.argsort(floors - quotas, axis=0, kind="stable")  # largest remainder first
    counts = floors.astype(np.int64)
    need = np.clip(steps - counts.sum(axis=0), 0, len(rates))
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(len(rates))[:, None], axis=0)
    counts += ranks < need[None, :]
    short = steps - counts.sum(axis=0)  # float rounding: the rest goes to the largest
    if short.any():
        counts[counts.argmax(axis=0), np.arange(len(steps))] += short
    return np.maximum(counts, 0)


def deadline_order_counts(rates: np.ndarray, steps: np.ndarray, bound: float) -> np.ndarray:
    """int64 [n, K]: a guess of the edf counts after ``steps[k]`` steps (int64 [K]): the
    first ``steps[k]`` deadlines ``(c + bound) / p_j`` in sorted order (what EDF takes
    when no release holds it back), clipped to the bound and summing to ``steps[k]``.

    Far better than the largest remainder for EDF: a rare dataset is taken near the end
    of its window, not when its remainder is large, and a wrong guess for it lasts until
    its next sample.
    """
    return _deadline_counts(rates[:, None], steps, bound, len(rates) + 2.0)


def _deadline_counts(rates_, steps, bound, width) -> np.ndarray:
    """:func:`deadline_order_counts` with rates float64 [n, 1] or per column [n, K] (0: a
    dataset the column never takes), ``bound`` and ``width`` (n + 2, the live datasets'
    count) a float or per column [K]."""
    target = steps.astype(np.float64)
    # sum_j N_j(x) lies within n + 1 of x
    low, high = target - width, target + width

    def taken(threshold):  # deadlines <= threshold, per dataset
        return np.maximum(0.0, np.floor(rates_ * threshold - bound) + 1.0)

    for _ in range(48):
        middle = (low + high) / 2
        enough = taken(middle).sum(axis=0) >= target
        high = np.where(enough, middle, high)
        low = np.where(enough, low, middle)
    counts = taken(high)
    quotas = rates_ * target
    counts = np.clip(counts, np.ceil(quotas - bound), np.floor(quotas + bound))
    return _fix_sums(counts, rates_, steps, bound)


def _fix_sums(counts: np.ndarray, rates: np.ndarray, steps: np.ndarray, bound: float):
    """Counts (float [n, K]) moved one at a time, by deadline, until column k sums to
    ``steps[k]``; int64, never negative."""
    columns = np.arange(counts.shape[1])
    for _ in range(2 * counts.shape[0] + 2):
        short = steps - counts.sum(axis=0)
        if not short.any():
            break
        grow = short > 0
        with np.errstate(divide="ignore", invalid="ignore"):  # rate 0: never taken
            next_deadline = np.where(counts >= 0, (counts + bound) / rates, np.inf)
            last_deadline = np.where(counts > 0, (counts - 1 + bound) / rates, -np.inf)
        add = np.argmin(next_deadline, axis=0)
        drop = np.argmax(last_deadline, axis=0)
        counts[add[grow], columns[grow]] += 1
        shrink = short < 0
        counts[drop[shrink], columns[shrink]] -= 1
    counts = np.maximum(counts, 0).astype(np.int64)
    short = steps - counts.sum(axis=0)
    if short.any():  # any rest on the largest count (a guess need not be good)
        counts[counts.argmax(axis=0), columns] += short
    return np.maximum(counts, 0)


#: The balanced order repeats a period of at most this many samples (rational rates).
MAX_PERIOD = 1 << 20
#: Rates within this of ``a_j / P`` count as rational (a few float64 roundings of 1).
PERIOD_TOLERANCE = 2.0**-50


def period_counts(rates: np.ndarray) -> np.ndarray | None:
    """int64 [n] counts ``a`` (each >= 1, ``P = sum(a) <= MAX_PERIOD``) with
    ``|rates_j - a_j / P| <= PERIOD_TOLERANCE`` for every j, or None.

    The denominators come from each rate's continued fraction (all rates at once, the
    first convergent within the tolerance); P is their least common multiple. Weights
    written as decimals or small integers (0.4/0.3/0.2/0.1, 3:7, token counts with a
    small sum) have such a period; random floats do not.
    """
    x = np.asarray(rates, dtype=np.float64)
    rest = x.copy()
    h_prev, h_last = np.zeros_like(x), np.ones_like(x)  # convergents h/k (exact floats)
    k_prev, k_last = np.ones_like(x), np.zeros_like(x)
    denominator = np.zeros_like(x)
    active = np.ones(len(x), dtype=bool)
    with np.errstate(all="ignore"):
        for _ in range(64):
            term = np.floor(rest)
            h = term * h_last + h_prev
            k = term * k_last + k_prev
            found = active & (np.abs(x - h / k) <= PERIOD_TOLERANCE)
            denominator[found] = k[found]
            active &= ~found & (k <= MAX_PERIOD)
            if not active.any():
                break
            fraction = rest - term
            rest = np.where(active & (fraction > 0), 1.0 / fraction, 1.0)
            h_prev, h_last, k_prev, k_last = h_last, h, k_last, k
    if not np.all(denominator >= 1):
        return None
    period = 1
    for value in np.unique(denominator):
        period = math.lcm(period, int(value))
        if period > MAX_PERIOD:
            return None
    counts = np.rint(x * period).astype(np.int64)
    if int(counts.sum()) != period or counts.min() < 1:
        return None
    if np.max(np.abs(x - counts / period)) > PERIOD_TOLERANCE:
        return None
    return counts


#: Added to (or subtracted from) a masked dataset's key: far beyond any real deadline
#: (rates below MIN_RATE are dropped, so deadlines stay below ~2**152) or error.
HUGE = 1e300
#: The unit roundoff of float64.
EPSILON = 2.0**-53
#: EDF rates below this are never picked (their first release lies past step 2**100).
MIN_RATE = 2.0**-100


class Megatron:
    """``argmax_j w_j * max(t, 1) - c_j`` over K columns (a dataset at its cap is skipped).

    State: counts float64 [n, K] (exact integers, as the C++ casts them), the step t of
    each column (float64 [K]); scratch arrays are reused across steps. The per-dataset
    loop is branch-free (a masked copy costs many times the arithmetic with unpredictable
    masks): see ``_follow``.
    """

    #: The per-dataset loop gives way to one pass over [K, n] rows above this many
    #: datasets (counts kept transposed: a row argmax is much faster than down columns).
    WIDE = 256

    def __init__(self, weights: np.ndarray, caps: np.ndarray | None) -> None:
        self.weights = weights
        self.caps = None if caps is None else caps.astype(np.float64)[:, None]
        self.wide = len(weights) > self.WIDE

    def start(self, counts: np.ndarray, steps: np.ndarray) -> None:
        """Start K runs at steps ``steps`` (int64 [K]) from ``counts`` (int [n, K])."""
        # C order: the flat view must share memory; exact below 2**53, as in the C++
        size = len(steps)
        self.offsets = np.arange(size, dtype=np.intp)
        if self.wide:  # [K, n]: each column's counts contiguous (argmax per row)
            self.counts_t = np.ascontiguousarray(np.asarray(counts).T, dtype=np.float64)
            self.counts = self.counts_t.T
            self.flat = self.counts_t.reshape(-1)
            self.scale, self.base = 1, self.offsets * len(self.weights)
            self.errors = np.empty((size, len(self.weights)))
        else:
            self.counts = np.ascontiguousarray(counts, dtype=np.float64)
            self.flat = self.counts.reshape(-1)
            self.scale, self.base = size, self.offsets
        self.time = steps.astype(np.float64)
        self.best, self.key, self.x = np.empty(size), np.empty(size), np.empty(size)
        self.mask = np.empty(size, dtype=bool)
        self.late = np.empty(size, dtype=bool)
        self.where = np.empty(size, dtype=np.intp)
        self.move = np.empty(size, dtype=np.intp)

    def _masked(self, spent: np.ndarray | None, j: int, key: np.ndarray, sign: float) -> None:
        if spent is not None:
            key += sign * HUGE * spent[j]

    def _follow(self, pick: np.ndarray, j: int) -> None:
        """``pick[mask] = j`` without a branch per element: datasets come in increasing
        order, so ``pick < j`` and ``max(pick, mask * j)`` is the same."""
        np.multiply(self.mask, j, out=self.move)
        np.maximum(pick, self.move, out=pick)

    def step(self, pick: np.ndarray, before: np.ndarray) -> None:
        """One step of every run: writes ``pick`` (intp [K]) and ``before`` (float64 [K],
        the picked dataset's count before the step)."""
        counts, weights, x = self.counts, self.weights, self.x
        np.maximum(self.time, 1.0, out=x)
        if self.wide:  # [K, n] rows: a contiguous argmax per column
            errors = np.multiply.outer(x, weights, out=self.errors)
            errors -= self.counts_t
            if self.caps is not None:
                errors -= HUGE * (self.counts_t >= self.caps.T)
            np.argmax(errors, axis=1, out=pick)
            self._take(pick, before)
            return
        spent = None if self.caps is None else counts >= self.caps
        best, error, mask = self.best, self.key, self.mask
        np.multiply(x, weights[0], out=best)
        best -= counts[0]
        self._masked(spent, 0, best, -1.0)
        pick.fill(0)
        for j in range(1, len(weights)):
            np.multiply(x, weights[j], out=error)
            error -= counts[j]
            self._masked(spent, j, error, -1.0)
            np.greater(error, best, out=mask)
            np.maximum(best, error, out=best)
            self._follow(pick, j)
        self._take(pick, before)

    def _take(self, pick: np.ndarray, before: np.ndarray) -> None:
        where = self.where
        np.multiply(pick, self.scale, out=where)
        where += self.base
        np.take(self.flat, where, out=before)
        self.flat[where] = before + 1.0
        self.time += 1.0

    def state(self) -> np.ndarray:
        """int64 [n, K]: the counts now."""
        return self.counts.astype(np.int64)

    def guess(self, steps: np.ndarray) -> np.ndarray:
        """int64 [n, K]: a guess of the counts after ``steps[k]`` steps."""
        return apportion(self.weights / self.weights.sum(), steps)


class MegatronShortlist(Megatron):
    """The megatron rule (no caps) over many datasets, exact, on a shortlist per column.

    The steps run in blocks of ``B`` steps. Before step ``s`` of a block at most ``s``
    datasets were picked in it, so one of the ``s + 1`` largest errors ``e_(s+1)`` at
    the block's start was not, and its error grew by ``w_j * s >= w_min * s`` since: the
    max error of every step of the block is at least
    ``L = min_s (e_(s+1) + w_min * s) - r``, ``r = 8 u (x + 1)`` bounding the rounding
    of the computed errors (each within ``4 u (x + 1)`` of the real one). A dataset whose
    computed error at the block's last ``x``, with its count at the start, is below
    ``L`` (``fl(w x)`` is monotone in x) can neither win nor tie a step of the block.
    The shortlist holds the others (about B of n), in increasing dataset order, so the
    row argmax breaks ties to the lowest dataset as the full one does. A step costs
    ~B per column instead of n; the block's start costs a few passes over [K, n].

    Extra state: per group of columns, the shortlists' dataset ids intp [k, m] (padded
    with the dummy dataset n: weight 0, count HUGE, never the max), their weights and
    counts [k, m]; the full counts [K, n + 1] are brought up to date at a block's end
    and by :meth:`state`.
    """

    def __init__(self, weights: np.ndarray, block: int) -> None:
        super().__init__(weights, None)
        self.wide = True
        self.block = int(min(block, len(weights) - 1))
        self.width = 2 * self.block  # a step reads B to 2B per column (segment lengths)
        self.padded = np.append(weights, 0.0)
        self.lowest = float(weights.min()) * (1.0 - 2 * EPSILON)  # below every w_j

    def start(self, counts: np.ndarray, steps: np.ndarray) -> None:
        size, n = len(steps), len(self.weights)
        self.offsets = np.arange(size, dtype=np.intp)
        self.rows = self.offsets[:, None]
        self.counts_t = np.empty((size, n + 1))
        self.counts_t[:, :n] = np.asarray(counts).T
        self.counts_t[:, n] = HUGE
        self.time = steps.astype(np.float64)
        self.errors = np.empty((size, n))
        self.x = np.empty(size)
        self.groups: list = []  # no shortlist yet: the first step makes them
        self.left = 0

    def _shortlist(self) -> None:
        """The shortlists of every column for the block starting now, in groups of
        columns by shortlist length (a run's true start, where every error lies near
        every other for the first ~n steps, lists nearly all datasets)."""
        n, block = len(self.weights), self.block
        counts = self.counts_t[:, :n]
        now = np.maximum(self.time, 1.0)
        errors = np.multiply.outer(now, self.weights, out=self.errors)
        errors -= counts
        top = -np.sort(np.partition(-errors, block - 1, axis=1)[:, :block], axis=1)
        last = np.maximum(self.time + (block - 1), 1.0)
        steps = np.maximum(self.time[:, None] + np.arange(block), 1.0) - now[:, None]
        floor = (top + self.lowest * steps).min(axis=1) - 8 * EPSILON * (last + 1.0)
        np.multiply.outer(last, self.weights, out=errors)
        errors -= counts
        rows, ids = np.nonzero(errors >= floor[:, None])
        lengths = np.bincount(rows, minlength=len(self.time))
        starts = np.cumsum(lengths) - lengths
        places = np.arange(len(rows)) - starts[rows]
        median = np.median(lengths)
        bounds = np.array([1.25 * median, 4 * median, np.inf])
        kind = np.searchsorted(bounds, lengths)
        self.groups = []
        for number in range(len(bounds)):
            members = np.flatnonzero(kind == number)
            if members.size == 0:
                continue
            group = np.full(len(self.time), -1, dtype=np.intp)
            group[members] = np.arange(members.size)
            short_ids = np.full((members.size, int(lengths[members].max())), n, dtype=np.intp)
            keep = group[rows] >= 0
            short_ids[group[rows[keep]], places[keep]] = ids[keep]
            self.groups.append(
                (
                    members,
                    short_ids,
                    self.padded[short_ids],
                    self.counts_t[members[:, None], short_ids],
                    np.empty(short_ids.shape),
                    np.arange(members.size) * short_ids.shape[1],
                )
            )
        self.left = block

    def _store(self) -> None:
        for members, ids, _, counts, _, _ in self.groups:  # the dummy's HUGE stays HUGE
            self.counts_t[members[:, None], ids] = counts

    def step(self, pick: np.ndarray, before: np.ndarray) -> None:
        if self.left == 0:
            self._store()
            self._shortlist()
        for members, ids, weights, counts, errors, base in self.groups:
            x = np.maximum(self.time[members], 1.0)
            np.multiply(weights, x[:, None], out=errors)
            errors -= counts
            where = np.argmax(errors, axis=1)
            where += base
            pick[members] = ids.reshape(-1)[where]
            flat = counts.reshape(-1)
            taken = flat[where]
            before[members] = taken
            flat[where] = taken + 1.0
        self.time += 1.0
        self.left -= 1

    def state(self) -> np.ndarray:
        self._store()
        return self.counts_t[:, : len(self.weights)].T.astype(np.int64)


class Edf(Megatron):
    """Earliest deadline first with bound D over K columns (see the module docstring).

    Extra state: release ``(c + slack) / p`` and deadline ``(c + D) / p``, float64 [n, K],
    recomputed for the picked dataset after each step. A dataset not yet released (or
    at its cap) competes with ``max(deadline, HUGE)``.
    """

    #: Wide runs keep counts, releases and deadlines as [K, n] (argmin along rows).
    WIDE = 24

    def __init__(self, rates: np.ndarray, caps: np.ndarray | None) -> None:
        super().__init__(rates, caps)
        # D and 1 - D (EdfStages: per column, float64 [K])
        self.bound: float | np.ndarray = edf_bound(len(rates))
        self.slack: float | np.ndarray = 1.0 - self.bound

    def guess(self, steps: np.ndarray) -> np.ndarray:
        return deadline_order_counts(self.weights, steps, float(self.bound))

    def start(self, counts: np.ndarray, steps: np.ndarray) -> None:
        super().start(counts, steps)
        self.time += 1.0  # x = t + 1, the prefix length after the step
        if self.wide:  # [K, n] as counts_t; .release/.deadline are [n, K] views
            self.release_t = (self.counts_t + self.slack) / self.weights
            self.deadline_t = (self.counts_t + self.bound) / self.weights
            self.release, self.deadline = self.release_t.T, self.deadline_t.T
            self.release_flat = self.release_t.reshape(-1)
            self.deadline_flat = self.deadline_t.reshape(-1)
            self.late_t = np.empty(self.counts_t.shape, dtype=bool)
            self.due_t = np.empty(self.counts_t.shape)
        else:
            rates = self.weights[:, None]
            self.release = (self.counts + self.slack) / rates
            self.deadline = (self.counts + self.bound) / rates
            self.release_flat = self.release.reshape(-1)
            self.deadline_flat = self.deadline.reshape(-1)
        self.rate = np.empty(len(steps))

    def _key(self, spent, j: int, out: np.ndarray) -> np.ndarray:
        """Dataset j's deadline, or at least HUGE where it may not take this step."""
        late = self.late
        np.greater(self.release[j], self.time, out=late)
        if spent is not None:
            late |= spent[j]
        np.multiply(late, HUGE, out=out)
        return np.maximum(self.deadline[j], out, out=out)

    def _step_wide(self, pick: np.ndarray) -> None:
        """The wide step over [K, n] rows: ``pick`` = argmin of released deadlines."""
        late, due = self.late_t, self.due_t
        np.greater(self.release_t, self.time[:, None], out=late)
        if self.caps is not None:
            late |= self.counts_t >= self.caps.T
        np.multiply(late, HUGE, out=due)
        np.maximum(self.deadline_t, due, out=due)
        np.argmin(due, axis=1, out=pick)
        self.best[:] = due[self.offsets, pick]

    def step(self, pick: np.ndarray, before: np.ndarray) -> None:
        spent = None if self.caps is None or self.wide else self.counts >= self.caps
        best = self.best
        if self.wide:
            self._step_wide(pick)
        else:
            self._key(spent, 0, best)
            pick.fill(0)
            for j in range(1, self.counts.shape[0]):
                due = self._key(spent, j, self.key)
                np.less(due, best, out=self.mask)
                np.minimum(best, due, out=best)
                self._follow(pick, j)
        if best.max() >= HUGE:  # nothing released: only float rounding at a bound
            stuck = best >= HUGE
            if self.caps is not None:
                spent = self.counts >= self.caps
            due = self.deadline + (0.0 if spent is None else HUGE * spent)
            pick[stuck] = np.argmin(due[:, stuck], axis=0)
        where = self.where
        np.multiply(pick, self.scale, out=where)
        where += self.base
        np.take(self.flat, where, out=before)
        after = before + 1.0
        self.flat[where] = after
        self._picked_rates(pick, where)
        self.release_flat[where] = (after + self.slack) / self.rate
        after += self.bound
        after /= self.rate
        self.deadline_flat[where] = after
        self.time += 1.0

    def _picked_rates(self, pick: np.ndarray, where: np.ndarray) -> None:
        """``self.rate``: the rate of each column's pick (``where``: its flat place)."""
        np.take(self.weights, pick, out=self.rate)


def _needed_runs(runs: np.ndarray | None) -> np.ndarray:
    if runs is None:  # (as a missing argument would)
        raise TypeError("EdfStages: runs (each column's run) is required")
    return runs


class EdfStages(Edf):
    """EDF over K columns that belong to S independent runs, each with its own rates.

    ``rates`` float64 [S, n]: run s's rates, 0 for a dataset it never takes (its release
    and deadline are +inf); each run's bound D is Tijdeman's for its own count of rates
    > 0, so a column follows :func:`scalar_edf` over that run's rates > 0 (value for
    value: the same operations on the same floats). :meth:`start` takes each column's
    run beside its counts and steps; the rates, bounds and slacks are per column.
    """

    def __init__(self, rates: np.ndarray) -> None:
        self.table = np.ascontiguousarray(rates, dtype=np.float64)
        self.live = np.count_nonzero(self.table > 0, axis=1)
        self.bounds = np.array([edf_bound(int(count)) for count in self.live])
        self.caps = None
        self.wide = self.table.shape[1] > self.WIDE

    def guess(self, steps: np.ndarray, runs: np.ndarray | None = None) -> np.ndarray:
        """int64 [n, K]: :func:`deadline_order_counts` of each column's run (``runs``
        needed: optional only to keep Edf's signature)."""
        runs = _needed_runs(runs)
        rates = self.table[runs].T
        counts = _deadline_counts(rates, steps, self.bounds[runs], self.live[runs] + 2.0)
        counts[rates == 0] = 0  # (a run with one dataset has D = 0: 0 / 0 above)
        return counts

    def start(
        self, counts: np.ndarray, steps: np.ndarray, runs: np.ndarray | None = None
    ) -> None:
        """Start K columns at steps ``steps`` (int64 [K]) of runs ``runs`` (int [K], needed)
        from ``counts`` (int [n, K])."""
        runs = _needed_runs(runs)
        size, datasets = len(steps), self.table.shape[1]
        self.offsets = np.arange(size, dtype=np.intp)
        bound = self.bounds[runs]
        slack = 1.0 - bound
        self.bound, self.slack = bound, slack
        rates = self.table[runs]  # [K, n]
        if self.wide:  # [K, n] rows; .counts/.release/.deadline are [n, K] views
            self.counts_t = np.ascontiguousarray(np.asarray(counts).T, dtype=np.float64)
            self.counts, self.flat = self.counts_t.T, self.counts_t.reshape(-1)
            self.scale, self.base = 1, self.offsets * datasets
            with np.errstate(divide="ignore", invalid="ignore"):
                self.release_t = (self.counts_t + slack[:, None]) / rates
                self.deadline_t = (self.counts_t + bound[:, None]) / rates
            self.release_t[rates == 0] = np.inf
            self.deadline_t[rates == 0] = np.inf
            self.release, self.deadline = self.release_t.T, self.deadline_t.T
            self.release_flat = self.release_t.reshape(-1)
            self.deadline_flat = self.deadline_t.reshape(-1)
            self.rates_flat = rates.reshape(-1)
            self.late_t = np.empty(self.counts_t.shape, dtype=bool)
            self.due_t = np.empty(self.counts_t.shape)
        else:  # [n, K]
            self.counts = np.ascontiguousarray(counts, dtype=np.float64)
            self.flat = self.counts.reshape(-1)
            self.scale, self.base = size, self.offsets
            rates = np.ascontiguousarray(rates.T)
            with np.errstate(divide="ignore", invalid="ignore"):
                self.release = (self.counts + self.slack) / rates
                self.deadline = (self.counts + self.bound) / rates
            self.release[rates == 0] = np.inf
            self.deadline[rates == 0] = np.inf
            self.release_flat = self.release.reshape(-1)
            self.deadline_flat = self.deadline.reshape(-1)
            self.rates_flat = rates.reshape(-1)
        self.time = steps.astype(np.float64) + 1.0  # x = t + 1, as Edf
        self.best, self.key, self.x = np.empty(size), np.empty(size), np.empty(size)
        self.mask = np.empty(size, dtype=bool)
        self.late = np.empty(size, dtype=bool)
        self.where = np.empty(size, dtype=np.intp)
        self.move = np.empty(size, dtype=np.intp)
        self.rate = np.empty(size)

    def _picked_rates(self, pick: np.ndarray, where: np.ndarray) -> None:
        np.take(self.rates_flat, where, out=self.rate)


# -- plain Python: small sizes, and the sequential fallback ------------------------------


def scalar_megatron(weights, caps, counts, first: int, stop: int) -> tuple[list, list]:
    """Steps ``[first, stop)`` of the megatron rule from ``counts``: (picks, samples)."""
    w = [float(value) for value in weights]
    c = [int(value) for value in counts]
    cap = [math.inf] * len(w) if caps is None else [int(value) for value in caps]
    ids = range(len(w))
    picks, samples = [], []
    for t in range(first, stop):
        x = float(t) if t > 1 else 1.0
        pick, best = -1, -math.inf
        for j in ids:
            error = w[j] * x - c[j]
            if error > best and c[j] < cap[j]:
                pick, best = j, error
        picks.append(pick)
        samples.append(c[pick])
        c[pick] += 1
    return picks, samples


def scalar_edf(rates, caps, counts, first: int, stop: int) -> tuple[list, list]:
    """Steps ``[first, stop)`` of the edf rule from ``counts``: (picks, samples)."""
    p = [float(value) for value in rates]
    c = [int(value) for value in counts]
    cap = [math.inf] * len(p) if caps is None else [int(value) for value in caps]
    bound = edf_bound(len(p))
    slack = 1.0 - bound
    release = [(c[j] + slack) / p[j] for j in range(len(p))]
    deadline = [(c[j] + bound) / p[j] for j in range(len(p))]
    ids = range(len(p))
    picks, samples = [], []
    for t in range(first, stop):
        x = float(t + 1)
        pick, best = -1, math.inf
        for j in ids:
            if release[j] <= x and deadline[j] < best and c[j] < cap[j]:
                pick, best = j, deadline[j]
        if pick < 0:  # as in the vectorized form: float rounding at a bound only
            pick = min((j for j in ids if c[j] < cap[j]), key=lambda j: (deadline[j], j))
        picks.append(pick)
        samples.append(c[pick])
        c[pick] += 1
        release[pick] = (c[pick] + slack) / p[pick]
        deadline[pick] = (c[pick] + bound) / p[pick]
    return picks, samples
