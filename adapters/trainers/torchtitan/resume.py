"""torchtitan's resume: the loader's state as torchtitan's checkpointer (DCP) keeps it.

``{"megadata": JSON text}``: megadata's loader state (the sampler's ``consumed_samples``
and the data's fingerprint), the same on every DP rank (see the package docstring)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from megadata_core.errors import DataError

#: The key of the loader's state in its ``state_dict`` (one for every rank).
STATE_KEY = "megadata"


def to_titan_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """megadata's loader ``state`` as the loader's ``state_dict``."""
    return {STATE_KEY: json.dumps(state, sort_keys=True)}


def from_titan_state(state_dict: Mapping[str, Any]) -> Any:
    """megadata's loader state in ``state_dict`` (JSON text, bytes or the object)."""
    if STATE_KEY not in state_dict:
        raise DataError(
            f"state_dict: no {STATE_KEY!r} key (keys {sorted(state_dict)}): not a "
            "MegadataDataLoader state"
        )
    state = state_dict[STATE_KEY]
    if isinstance(state, bytes):
        state = state.decode("utf-8")
    return json.loads(state) if isinstance(state, str) else state
