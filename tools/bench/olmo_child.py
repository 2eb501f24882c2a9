"""Builds OLMo-core's ``NumpyPackedFSLDataset`` in a fresh interpreter of the OLMo overlay
environment (see :mod:`bench.olmo`) and prints ``RESULT {json}``.

Run as ``python -I olmo_child.py SPEC_JSON``; it imports numpy and olmo_core only (never
megadata). SPEC: ``tokens`` (the raw uint16 token file OLMo-core reads), ``lengths`` (a
.npy of the int64 document lengths in file order, for the checks), ``sequence_length``,
``eos``, ``vocab``, ``metadata`` (true: document boundaries from the ``.csv.gz`` beside
the token file, ``use_array_if_local=False``; false: OLMo-core's default EOS scan of the
array), ``work_dir`` (fresh, for OLMo-core's packing caches).
"""

from __future__ import annotations

import json
import logging
import resource
import sys
import time

import numpy as np


def proc_status(key: str) -> int:
    """Bytes of a /proc/self/status field (VmRSS, VmHWM)."""
    with open("/proc/self/status") as stream:
        for line in stream:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def build(spec: dict) -> dict:
    from olmo_core.data.numpy_dataset import NumpyPackedFSLDataset
    from olmo_core.data.types import LongDocStrategy

    logging.disable(logging.INFO)
    baseline = proc_status("VmRSS")
    start = time.perf_counter()
    dataset = NumpyPackedFSLDataset(
        spec["tokens"],
        sequence_length=spec["sequence_length"],
        pad_token_id=spec["eos"],
        eos_token_id=spec["eos"],
        vocab_size=spec["vocab"],
        dtype=np.uint16,
        long_doc_strategy=LongDocStrategy.fragment,  # cut, never drop: as ours does
        use_array_if_local=False if spec["metadata"] else None,
    )
    dataset.work_dir = spec["work_dir"]
    dataset.prepare()  # packs in a worker process (ProcessPoolExecutor), as in training
    instances = len(dataset)
    seconds = time.perf_counter() - start
    # the packing runs in a forked worker: its peak counts too
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    peak = max(proc_status("VmHWM"), children)

    # checks, untimed: OLMo-core's fragments ([start, end) token ranges, sorted by length)
    # against the documents the token file holds
    def cached(path) -> np.ndarray:
        return np.fromfile(path(spec["tokens"]), dtype=np.uint64).astype(np.int64)

    fragments = cached(dataset._get_document_indices_path).reshape(-1, 2)
    placed = np.bincount(cached(dataset._get_docs_by_instance_path), minlength=len(fragments))
    lengths = np.load(spec["lengths"])
    ends = np.cumsum(lengths)
    kept = int((fragments[:, 1] - fragments[:, 0]).sum())
    by_start = fragments[np.argsort(fragments[:, 0])]
    tiled = (  # the fragments tile the token file: every token in exactly one
        by_start[0, 0] == 0
        and by_start[-1, 1] == ends[-1]
        and bool(np.array_equal(by_start[1:, 0], by_start[:-1, 1]))
    )
    # a fragment that ends inside a document (not at its end) means that document was cut
    inside = fragments[:, 1][~np.isin(fragments[:, 1], ends)]
    cut = len(np.unique(np.searchsorted(ends, inside, side="right")))
    capacity = spec["sequence_length"]
    return {
        "samples": instances,
        "padding": 1 - kept / (instances * capacity),
        "cut": cut,
        "every_token_once": tiled and bool((placed == 1).all()),
        "seconds": seconds,
        "peak": peak,
        "baseline": baseline,
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(build(json.loads(sys.argv[1]))), flush=True)
