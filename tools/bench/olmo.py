"""OLMo-core's ``NumpyPackedFSLDataset`` as a peer of the packing suite, run in an overlay
environment.

``ai2-olmo-core`` (3.0.0) installs without CUDA over this environment's torch, but pins
``filelock<4`` and (through ``cached-path``) ``huggingface_hub<2``: installed here it would
downgrade packages the rest of the environment uses. So it lives in a venv in the bench
cache (``$MEGADATA_BENCH_CACHE/olmo-venv-…``) whose ``.pth`` appends this interpreter's
site-packages (torch and numpy are not reinstalled; OLMo-core's own filelock and
huggingface_hub shadow the base ones there only). It is built under a temporary name and
renamed into place once ``pip install`` succeeded, so its presence means it is complete.
Each OLMo-core build runs in a fresh interpreter of that venv (:mod:`bench.olmo_child`).
"""

from __future__ import annotations

import gzip
import json
import os

import numpy as np

from bench.harness import ChildFailedError, child_result
from bench.overlays import Overlay, last_line

OLMO_CORE = "ai2-olmo-core==3.0.0"
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "olmo_child.py")


OVERLAY = Overlay("olmo", OLMO_CORE, (OLMO_CORE,), "olmo_core.data.numpy_dataset",
                  pins=OLMO_CORE)
overlay_python = OVERLAY.python


# -- OLMo-core's inputs -----------------------------------------------------------------


def write_olmo_tokens(path: str, lengths: np.ndarray, eos: int, vocab: int, seed: int) -> None:
    """OLMo-core's token file for documents of ``lengths`` (in this order): raw uint16
    token ids (a Dolma ``.npy`` has no header), random ids in [1, vocab) with ``eos``
    ending every document, which is how OLMo-core finds the boundaries by default."""
    ends = np.cumsum(lengths, dtype=np.int64)
    tokens = np.random.default_rng(seed).integers(1, vocab, size=int(ends[-1]), dtype=np.uint16)
    tokens[ends - 1] = eos
    tokens.tofile(path)
    np.save(path + ".lengths.npy", np.asarray(lengths, dtype=np.int64))


def write_olmo_metadata(path: str, lengths: np.ndarray) -> None:
    """A sparse token file of the documents' total size and the Dolma metadata
    ``.csv.gz`` beside it (``start,end`` per document), which OLMo-core reads with
    ``use_array_if_local=False`` (its path for remote sources, and the authoritative one)."""
    ends = np.cumsum(lengths, dtype=np.int64)
    with open(path, "wb"):
        pass
    os.truncate(path, int(ends[-1]) * 2)
    starts = ends - lengths
    metadata = path[: -len(".npy")] + ".csv.gz"
    with gzip.open(metadata, "wt", compresslevel=1) as stream:
        step = 1_000_000
        for first in range(0, len(lengths), step):
            pairs = np.stack([starts[first : first + step], ends[first : first + step]], axis=1)
            stream.write("\n".join(f"{a},{b}" for a, b in pairs.tolist()) + "\n")
    np.save(path + ".lengths.npy", np.asarray(lengths, dtype=np.int64))


def run_olmo(python: str, tokens: str, sequence_length: int, eos: int, vocab: int,
             metadata: bool, work_dir: str) -> dict | str:
    """One cold build of OLMo-core's NumpyPackedFSLDataset over ``tokens`` in a fresh
    interpreter: its result dict, or why it failed (a str)."""
    spec = {
        "tokens": tokens,
        "lengths": tokens + ".lengths.npy",
        "sequence_length": sequence_length,
        "eos": eos,
        "vocab": vocab,
        "metadata": metadata,
        "work_dir": work_dir,
    }
    try:
        return child_result([python, "-I", CHILD, json.dumps(spec)], "OLMo-core build")
    except ChildFailedError as failure:
        return f"fails: {last_line(str(failure))}"
