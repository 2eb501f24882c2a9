"""A short fingerprint of a dataset's identity, for resume states to carry.

A loader's resume state (consumed samples) means something only for the data and config
it was made for; restored onto another dataset of the same length it would continue
silently with other samples. The Grain and torch adapters put :func:`fingerprint` into
their states and refuse a state whose fingerprint differs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from megadata_core.errors import DataError


def fingerprint(dataset: Any) -> str | None:
    """First 12 hex digits of the sha256 of the dataset's ``description()`` (every input
    of its index arrays: data identity, seed, sequence length, split, ...); None when the
    dataset has no description (or returns None)."""
    describe = getattr(dataset, "description", None)
    description = describe() if callable(describe) else None
    if description is None:
        return None
    text = json.dumps(description, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def resume_fields(dataset: Any) -> dict[str, Any]:
    """What a loader state carries of its data: ``fingerprint``, and for a blend schedule
    (a dataset with ``resume_record``) its stages as ``blend_schedule``, so that a
    restore onto an edited schedule can be checked (:func:`continues_schedule`)."""
    fields: dict[str, Any] = {"fingerprint": fingerprint(dataset)}
    record = getattr(dataset, "resume_record", None)
    if callable(record):
        fields["blend_schedule"] = record()
    return fields


def continues_schedule(state: Any, dataset: Any, consumed: int, *, sequential: bool) -> bool:
    """True when ``state`` (whose fingerprint differs from the dataset's) was made on a
    blend schedule that this dataset's schedule edits after ``consumed`` samples: the
    samples before are the same, so the reader may go on. False when either side has no
    schedule (the caller refuses the state as other data).

    Raises:
        DataError: both are schedules and they differ before ``consumed``, or the reader
            is not ``sequential`` (a shuffled pass over the blend reads samples from
            everywhere: no edit leaves what it read unchanged).
    """
    continues = getattr(dataset, "continues", None)
    if not callable(continues) or not isinstance(state, Mapping) or "blend_schedule" not in state:
        return False
    if not sequential:
        raise DataError(
            "blend_schedule: the state was made on another schedule, and this reader "
            "shuffles the blend (a shuffled pass reads from the whole blend, so an edit "
            "changes samples already read); resume an edited schedule with a sequential "
            "sampler (PretrainingSampler, Grain's consumed-samples iterator)"
        )
    why = continues(state["blend_schedule"], consumed)
    if why is not None:
        raise DataError(
            f"blend_schedule: the state's schedule and this one differ before the "
            f"{consumed} samples already read ({why}); an edit may change only the stages "
            f"from sample {consumed} on"
        )
    return True
