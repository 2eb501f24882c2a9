"""Plain-loop references for the step batch-size schedule (one Python trip per step),
and Hypothesis strategies of schedule strings in Megatron's syntax."""

from __future__ import annotations

from hypothesis import strategies as st

SUFFIXES = {"": 1, "K": 10**3, "M": 10**6}


def batch_size_at(entries, consumed: int) -> int:
    """The batch size of the last ``(threshold, batch_size)`` entry with threshold <=
    consumed, by a linear scan (entries sorted)."""
    size = entries[0][1]
    for threshold, batch_size in entries:
        if threshold <= consumed:
            size = batch_size
    return size


def step_starts(entries, until: int) -> list[int]:
    """Consumed samples at the start of every step that starts at or before ``until``."""
    starts, consumed = [], 0
    while consumed <= until:
        starts.append(consumed)
        consumed += batch_size_at(entries, consumed)
    return starts


def train_iters(entries, train_samples: int) -> int:
    """Megatron's ``update_train_iters`` loop."""
    iterations, consumed = 0, 0
    while consumed < train_samples:
        consumed += batch_size_at(entries, consumed)
        iterations += 1
    return iterations


def first_difference(a, b) -> int | None:
    """Where the first step that differs between two entry lists starts (None: none)."""
    horizon = max(a[-1][0], b[-1][0])
    consumed = 0
    while True:
        size_a, size_b = batch_size_at(a, consumed), batch_size_at(b, consumed)
        if size_a != size_b:
            return consumed
        if consumed > horizon:  # both constant from here on
            return None
        consumed += size_a


def _spelled(value: int, draw) -> str:
    """``value`` in one of Megatron's spellings (a suffix when it divides, any case)."""
    options = [str(value)]
    for suffix, multiplier in SUFFIXES.items():
        if suffix and value % multiplier == 0:
            spelled = draw(st.sampled_from([suffix, suffix.lower()]))
            options.append(f"{value // multiplier}{spelled}")
    decimal = f"{value / 1000}"
    if int(float(decimal) * 1000) == value:  # e.g. 1.5K (0.29K would read as 289)
        options.append(f"{decimal}K")
    return draw(st.sampled_from(options))


@st.composite
def schedule_entries(draw, max_threshold: int = 400, batch_sizes=None, max_entries: int = 5):
    """Sorted ``[(threshold, batch_size), ...]`` with thresholds 0 < ... (samples)."""
    count = draw(st.integers(1, max_entries))
    later = draw(st.lists(st.integers(1, max_threshold), min_size=count - 1,
                          max_size=count - 1, unique=True))
    sizes = st.integers(1, 40) if batch_sizes is None else batch_sizes
    return [(t, draw(sizes)) for t in [0, *sorted(later)]]


@st.composite
def schedule_text(draw, entries):
    """Megatron's string of ``entries``: any order, spaces and commas, suffixes."""
    order = draw(st.permutations(entries))
    separators = st.sampled_from([" ", ",", ", ", "  ", " ,"])
    parts = [f"{_spelled(t, draw)}:{_spelled(b, draw)}" for t, b in order]
    text = parts[0]
    for part in parts[1:]:
        text += draw(separators) + part
    return draw(st.sampled_from(["", " "])) + text + draw(st.sampled_from(["", " ", ","]))
