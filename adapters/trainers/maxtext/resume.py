"""Resume MaxText's checkpointed Grain iterator on another number of hosts.

MaxText saves each host's input iterator with the model (``CHECKPOINT/STEP/iter/
process_I-of-N.json``, Grain's state: ``{"next_index": j}``) and restores only onto the
same number of processes. Over megadata's sources (and MaxText's own ``mmap_npy``) host
``h`` of ``N`` reads samples ``h, h + N, h + 2N, ...``, all hosts in step: after ``j``
samples each, the samples ``[0, N * j)`` are spent, whatever ``N`` was. So on ``M`` hosts
the run goes on from the same global sample ``P = N * j``, each host at ``P / M``: every
later global batch holds exactly the samples it would have held on ``N`` hosts (their
places within the batch follow the hosts).

:func:`reshard_states` is that arithmetic; :func:`reshard_iterator_checkpoint` rewrites a
local checkpoint's ``iter`` directory for ``M`` processes before the restart (each new file
written whole, then renamed; the old files removed after). Refused with a DataError naming
the file: states that are not in step, a state of another shape (Grain worker processes,
``grain_worker_count > 0``, keep one per worker), and a ``P`` that ``M`` does not divide.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import BinaryIO

from megadata_core.errors import DataError
from megadata_core.files.atomic import write_atomically

__all__ = ["reshard_iterator_checkpoint", "reshard_states"]

_STATE_FILE = re.compile(r"^process_(\d+)-of-(\d+)\.json$")


def reshard_states(states: Sequence[dict], new_count: int, what: str = "states") -> list[dict]:
    """The iterator states of ``new_count`` hosts that go on where the ``len(states)``
    hosts of ``states`` (host order) stopped."""
    if new_count < 1:
        raise DataError(f"new_count: {new_count} hosts (at least 1)")
    if not states:
        raise DataError(f"{what}: no iterator state")
    for number, state in enumerate(states):
        if not isinstance(state, dict) or set(state) != {"next_index"} or not isinstance(
            state["next_index"], int
        ):
            raise DataError(
                f"{what}: host {number}'s state {state!r} is not Grain's {{'next_index': j}} "
                "(an iterator with Grain worker processes keeps one per worker: reshard "
                "runs with grain_worker_count: 0)"
            )
    spent = {state["next_index"] for state in states}
    if len(spent) != 1:
        raise DataError(f"{what}: the hosts are not in step (next_index {sorted(spent)})")
    total = len(states) * spent.pop()
    if total % new_count:
        raise DataError(
            f"{what}: {total} samples spent on {len(states)} hosts do not divide among "
            f"{new_count} hosts"
        )
    return [{"next_index": total // new_count} for _ in range(new_count)]


def reshard_iterator_checkpoint(iter_directory: str, new_count: int) -> list[str]:
    """Rewrite the ``process_I-of-N.json`` files of a MaxText checkpoint's ``iter``
    directory (``CHECKPOINT/STEP/iter``, local) for ``new_count`` processes; returns the
    new files' paths."""
    try:
        names = os.listdir(iter_directory)
    except OSError as error:
        raise DataError(f"{iter_directory}: {error.strerror or error}") from None
    found = {}
    for name in names:
        match = _STATE_FILE.match(name)
        if match:
            found[(int(match[1]), int(match[2]))] = name
    counts = {count for _, count in found}
    if len(counts) != 1:
        raise DataError(
            f"{iter_directory}: expected one set of process_I-of-N.json files, found "
            f"{sorted(found.values())}"
        )
    count = counts.pop()
    if sorted(index for index, _ in found) != list(range(count)):
        raise DataError(f"{iter_directory}: the files of {count} processes are not all there")
    states = []
    for index in range(count):
        path = os.path.join(iter_directory, found[(index, count)])
        try:
            with open(path, encoding="utf-8") as stream:
                states.append(json.load(stream))
        except (OSError, ValueError) as error:
            raise DataError(f"{path}: unreadable iterator state ({error})") from None
    new_states = reshard_states(states, new_count, iter_directory)
    written = []
    for index, state in enumerate(new_states):
        path = os.path.join(iter_directory, f"process_{index}-of-{new_count}.json")
        data = json.dumps(state, indent=4).encode("utf-8")

        def write(stream: BinaryIO, data: bytes = data) -> None:
            stream.write(data)

        write_atomically(path, write, durable=True)
        written.append(path)
    if new_count != count:
        for name in found.values():
            os.remove(os.path.join(iter_directory, name))
    return written
