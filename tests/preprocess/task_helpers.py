"""Tokenizers that stop a task-plan run once at a known text, and input writers, shared by
the task-plan tests here and the Ray engine's tests (importable in worker processes)."""

from __future__ import annotations

import json
import os
import signal
import time

import numpy as np


class _OnceTokenizer:
    """ByteTokenizer that, the first time it meets ``trigger`` (no ``marker`` file yet),
    touches ``marker`` and then does ``_stop``; later runs encode it normally."""

    vocab_size = 257
    eod_id = 256
    trigger = ""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def encode(self, text):
        if text == self.trigger and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            self._stop()
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)

    def __repr__(self) -> str:  # stable: it is part of the plan's fingerprint
        return f"{type(self).__name__}()"


class StallOnceTokenizer(_OnceTokenizer):
    """Sleeps forever at "STALL": the driver is killed there."""

    trigger = "STALL"

    def _stop(self):
        while True:
            time.sleep(1)


class KillOnceTokenizer(_OnceTokenizer):
    """kill -9 of its own process at "KILL": a worker lost mid-task."""

    trigger = "KILL"

    def _stop(self):
        os.kill(os.getpid(), signal.SIGKILL)


def texts(count: int, special: dict[int, str] | None = None) -> list[str]:
    result = [f"document {i} " + "é" * (i % 7) + "x" * (i % 13) for i in range(count)]
    for index, text in (special or {}).items():
        result[index] = text
    return result


def write_inputs(directory, texts_: list[str]) -> dict[str, str]:
    """The same texts as .jsonl, .jsonl.gz and .parquet (row groups of 7): name -> path."""
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    data = b"".join(json.dumps({"text": t}).encode() + b"\n" for t in texts_)
    paths = {name: os.path.join(directory, f"in.{name}") for name in ("jsonl", "jsonl.gz",
                                                                        "parquet")}
    with open(paths["jsonl"], "wb") as stream:
        stream.write(data)
    with open(paths["jsonl.gz"], "wb") as stream:
        stream.write(gzip.compress(data))
    pq.write_table(pa.table({"text": texts_, "n": list(range(len(texts_)))}), paths["parquet"],
                   row_group_size=7)
    return paths
