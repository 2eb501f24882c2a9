"""One driver of the several-drivers preprocessing tests: ``python preprocess_hosts_child.py
INPUT PREFIX DELAY LOG TASK_SIZE`` with ``$MEGADATA_HOST_ID`` set. It runs the resumable
plan over ``INPUT`` into ``PREFIX`` with :class:`SlowTokenizer` (``DELAY`` seconds per
text), which appends each text it encodes to ``LOG``."""

from __future__ import annotations

import os
import sys
import time

import numpy as np


class SlowTokenizer:
    """Bytes as tokens (vocab 257, EOD 256), ``delay`` seconds per text, each text
    appended (one line) to ``log`` when given."""

    vocab_size = 257
    eod_id = 256

    def __init__(self, delay: float = 0.0, log: str | None = None) -> None:
        self.delay, self.log = delay, log

    def encode(self, text):
        if self.delay:
            time.sleep(self.delay)
        if self.log:
            handle = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(handle, text.encode("utf-8") + b"\n")
            finally:
                os.close(handle)
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)

    def __repr__(self) -> str:  # stable: it is part of the plan's fingerprint
        return "SlowTokenizer()"


def main(argv: list[str]) -> None:
    import functools

    from megadata_core.preprocess import preprocess_tasks

    source, prefix, delay, log, task_size = argv
    preprocess_tasks([source], prefix, functools.partial(SlowTokenizer, float(delay), log),
                     append_eod=True, task_size=int(task_size), claim_batch=1)


if __name__ == "__main__":
    main(sys.argv[1:])
