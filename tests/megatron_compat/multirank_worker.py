"""One rank of test_multirank: ``python multirank_worker.py RANK WORLD PORT CACHE OUT PREFIX...``.

Joins a gloo process group on 127.0.0.1, builds ``[train, valid, test]`` through
``megadata_adapters.trainers.megatron_datasets``' BlendedMegatronDatasetBuilder with the shared
cache
directory ``CACHE``, and writes to ``OUT/rank{RANK}.npz`` the samples it read and every
file it opened for writing or renamed into ``CACHE`` while building (seen by an audit
hook, so nothing in the build is replaced).
"""

from __future__ import annotations

import datetime
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "helpers"))  # as tests/conftest.py

from compat_helpers import build, ours  # noqa: E402

SIZES = [60, 12, 0]
CONFIG = dict(random_seed=11, sequence_length=16, split="80,20,0")
WEIGHTS = [0.2, 0.5, 0.3]
#: Sample indices read from each split.
READ = 12
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def samples(datasets) -> dict[str, np.ndarray]:
    """``{split.index.key: values}`` of the first ``READ`` samples of each split."""
    out = {}
    for split, dataset in enumerate(datasets):
        if dataset is None:
            continue
        for index in range(min(READ, len(dataset))):
            for key, value in dataset[index].items():
                out[f"{split}.{index}.{key}"] = np.asarray(value)
    return out


def main(rank: int, world: int, port: int, cache: str, out: str, prefixes: list[str]) -> None:
    cache = os.path.realpath(cache)
    writes: list[str] = []
    watching = False

    def audit(event: str, args: tuple) -> None:
        if not watching:
            return
        if event == "open":
            path, mode, flags = args
            writing = ("w" in mode or "a" in mode or "x" in mode or "+" in mode) if isinstance(
                mode, str
            ) else bool(flags & _WRITE_FLAGS)
            paths = [path] if writing else []
        elif event in ("os.rename", "os.link", "os.symlink"):
            paths = [args[1]]
        else:
            return
        for path in paths:
            if isinstance(path, (str, bytes, os.PathLike)):
                path = os.path.realpath(os.fsdecode(path))
                if os.path.dirname(path) == cache:
                    writes.append(os.path.basename(path))

    sys.addaudithook(audit)
    torch.distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=120),
    )
    watching = True
    datasets = build(ours, "GPTDataset", SIZES, blend=(prefixes, WEIGHTS),
                     path_to_cache=cache, **CONFIG)
    watching = False
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    arrays = samples(datasets)
    arrays["dataset_index"] = np.asarray(datasets[0].dataset_index)
    arrays["writes"] = np.array(json.dumps(writes))
    np.savez(os.path.join(out, f"rank{rank}.npz"), **arrays)


if __name__ == "__main__":
    rank, world, port = (int(value) for value in sys.argv[1:4])
    main(rank, world, port, sys.argv[4], sys.argv[5], sys.argv[6:])
