"""``GPTDataConfig.blend_schedule``: stages of blends, as code writes them and as text.

In code, a list of ``(start, blend)`` pairs, stages in order, the first at 0::

    blend_schedule=[(0, (["/data/web", "/data/code"], [0.8, 0.2])),
                    ("50B", "0.5 /data/web 0.2 /data/code 0.3 /data/math")]

``start`` is an int (samples) or a string (tokens, with Megatron's ``K``/``M``/``B``/``T``
suffixes, converted to samples as ``--step-batch-size-schedule`` thresholds are:
``int(float(number) * multiplier) // sequence_length``); ``blend`` is a ``(prefixes,
weights)`` pair or Megatron's ``--data-path`` string, with weights (a stage states its
mixture). A prefix may join at a later stage or leave one (weight 0, or not listed).

As text (the tools' ``--blend_schedule``, or a file of it), stages are separated by ``;``
or new lines, each ``START: WEIGHT PREFIX WEIGHT PREFIX ...``; ``#`` starts a comment;
a START is Megatron's threshold, in tokens::

    0:   0.8 /data/web 0.2 /data/code
    50B: 0.5 /data/web 0.2 /data/code 0.3 /data/math   # anneal on math

The normalized field is a tuple of ``(start in samples, (prefixes, weights))``;
:func:`schedule_arrays` lays it out for the indices (one id per prefix, in the order the
prefixes first appear, so a prefix keeps its id when later stages are edited).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from megadata_core.checks import megatron_count
from megadata_core.datasets import blend_args
from megadata_core.errors import DataError

Stage = tuple[int, tuple[tuple[str, ...], tuple[float, ...]]]


def token_count(text: str, field: str) -> int:
    """A count with Megatron's optional ``K``/``M``/``B``/``T`` suffix, parsed as its
    ``--step-batch-size-schedule`` parses one (:func:`~megadata_core.checks.megatron_count`),
    >= 0."""
    try:
        number = megatron_count(text)
    except ValueError:
        if text.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
            raise DataError(f"{field}: {text!r} must be a finite number >= 0") from None
        raise DataError(
            f"{field}: {text!r} is not a number (with an optional K, M, B or T suffix)"
        ) from None
    except OverflowError:
        raise DataError(f"{field}: {text!r} must be a finite number >= 0") from None
    if number < 0:
        raise DataError(f"{field}: {text!r} must be a finite number >= 0")
    return number


def _start(value: object, sequence_length: int, field: str) -> int:
    """A stage's start in samples: an int as is, a string as tokens."""
    if isinstance(value, str):
        return token_count(value, field) // sequence_length
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise DataError(f"{field}: {value!r} is not an int (samples) or a string (tokens)")
    if value < 0:
        raise DataError(f"{field}: {value} must be >= 0")
    return int(value)


def _stage_blend(value: object, field: str) -> tuple[tuple[str, ...], tuple[float, ...]]:
    prefixes, weights = blend_args.checked_blend(value, field)
    if weights is None:
        raise DataError(
            f"{field}: no weights; every stage of a schedule states its mixture "
            "(e.g. '0.7 /a 0.3 /b')"
        )
    seen: set[str] = set()
    for prefix in prefixes:
        if prefix in seen:
            raise DataError(f"{field}: prefix {prefix!r} is listed twice")
        seen.add(prefix)
    return prefixes, weights


def parse_schedule_text(text: str, field: str = "blend_schedule") -> list[tuple[str, str]]:
    """``[(start, blend string), ...]`` of the text form (see the module docstring)."""
    stages = []
    for line in text.replace(";", "\n").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        start, colon, blend = line.partition(":")
        if not colon or not start.strip() or not blend.strip():
            raise DataError(
                f"{field}: stage {line!r} is not 'START: WEIGHT PREFIX ...' "
                "(e.g. '50B: 0.5 /data/web 0.5 /data/math')"
            )
        stages.append((start.strip(), blend.strip()))
    if not stages:
        raise DataError(f"{field}: no stages in {text!r}")
    return stages


def check_blend_schedule(value: object, sequence_length: int, field: str = "blend_schedule"
                         ) -> tuple[Stage, ...]:
    """The normalized schedule: ``((start in samples, (prefixes, weights)), ...)``.

    Raises:
        DataError: naming the stage: a start that is not 0 first or not after the one
            before (in samples), a blend without weights, weights all 0 or negative.
    """
    if isinstance(value, str):
        value = parse_schedule_text(value, field)
    if isinstance(value, (bytes, os.PathLike)) or not isinstance(value, Sequence) or not value:
        raise DataError(f"{field}: {value!r} is not a non-empty list of (start, blend) stages")
    stages: list[Stage] = []
    for k, stage in enumerate(value):
        try:
            start, blend = stage
        except (TypeError, ValueError):
            raise DataError(f"{field}[{k}]: {stage!r} is not a (start, blend) pair") from None
        samples = _start(start, sequence_length, f"{field}[{k}] start")
        if k == 0 and samples != 0:
            raise DataError(f"{field}[0] start: {start!r} is sample {samples}; the first "
                            "stage starts at 0")
        if k and samples <= stages[-1][0]:
            raise DataError(
                f"{field}[{k}] start: {start!r} is sample {samples}, not after stage "
                f"{k - 1}'s {stages[-1][0]}; starts must increase (tokens are counted in "
                f"samples of {sequence_length})"
            )
        stages.append((samples, _stage_blend(blend, f"{field}[{k}] blend")))
    return tuple(stages)


def schedule_arrays(schedule: Sequence[Stage]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """``(prefixes, starts int64 [K], weights float64 [K, n])``: every prefix once, in the
    order of first appearance; a prefix a stage does not list has weight 0 there."""
    prefixes = list(dict.fromkeys(p for _, (names, _) in schedule for p in names))
    column = {prefix: number for number, prefix in enumerate(prefixes)}
    starts = np.array([start for start, _ in schedule], dtype=np.int64)
    weights = np.zeros((len(schedule), len(prefixes)), dtype=np.float64)
    for k, (_, (names, values)) in enumerate(schedule):
        weights[k, [column[p] for p in names]] = values
    return prefixes, starts, weights
