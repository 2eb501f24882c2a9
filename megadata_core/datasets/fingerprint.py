"""A short fingerprint of a dataset's identity, for resume states to carry.

A loader's resume state (consumed samples) means something only for the data and config
it was made for; restored onto another dataset of the same length it would continue
silently with other samples. The Grain and torch adapters put :func:`fingerprint` into
their states and refuse a state whose fingerprint differs.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


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
