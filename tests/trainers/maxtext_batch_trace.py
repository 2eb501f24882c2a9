"""Run MaxText through megadata's launcher, appending each batch's digest to a file.

``python maxtext_batch_trace.py TRACE MODULE ARGS...`` is ``python -m
megadata_adapters.trainers.maxtext MODULE ARGS...`` with MaxText's ``DataLoader`` wrapped:
every batch the train loop takes writes one line to ``TRACE`` (sha256 of its ``inputs``
and ``targets``), flushed at once, so a run killed mid-way leaves the batches it trained.
What tests/trainers/test_maxtext.py's resume test compares; nothing of MaxText's files is
changed.
"""

from __future__ import annotations

import hashlib
import sys

import numpy as np

from megadata_adapters.trainers import maxtext as megadata_maxtext
from megadata_adapters.trainers.maxtext.__main__ import main as launch_maxtext


def main(trace: str, argv: list[str]) -> None:
    megadata_maxtext.install()
    from maxtext.common import data_loader

    load = data_loader.DataLoader.load_next_batch_pre_sharding

    def traced(self):
        batch = load(self)
        digest = hashlib.sha256()
        for key in ("inputs", "targets"):
            digest.update(np.ascontiguousarray(np.asarray(batch[key])).tobytes())
        with open(trace, "a", encoding="ascii") as stream:
            stream.write(digest.hexdigest() + "\n")
        return batch

    data_loader.DataLoader.load_next_batch_pre_sharding = traced
    launch_maxtext(argv)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
