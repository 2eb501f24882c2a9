"""A trainer for tests/adapters/test_killed_trainer.py: reads batches through 2 worker
processes forever, after printing ``ready``.

    python killed_trainer.py KIND PREFIX CACHE

KIND: ``grain`` (``batched_dataset``, Grain ``mp_prefetch``), ``grain-loader``
(``grain.DataLoader`` over a ``GrainSource``), ``torch`` / ``torch-persistent``
(``torch.utils.data.DataLoader(TorchDataset)``), ``loader`` / ``loader-persistent``
(``torch_data.loader``: workers with shared-memory rings).
"""

from __future__ import annotations

import sys
import time

import numpy as np

import megadata_core as mdc


def batches(kind: str, dataset):
    """An endless iterator of micro-batches of 4 read by 2 workers."""
    if kind == "grain":
        from megadata_adapters.frameworks import grain_source

        return iter(grain_source.batched_dataset(dataset, micro_batch_size=4, worker_count=2))
    if kind == "grain-loader":
        import grain

        from megadata_adapters.frameworks import grain_source

        source = grain_source.GrainSource(dataset)
        sampler = grain.samplers.IndexSampler(len(source), shuffle=False, num_epochs=1, seed=0)
        return iter(grain.DataLoader(data_source=source, sampler=sampler, worker_count=2,
                                     operations=[grain.transforms.Batch(4)]))
    import torch

    from megadata_adapters.frameworks import torch_data

    sampler = mdc.samplers.PretrainingSampler(len(dataset), 0, 4, 0, 1)
    persistent = kind.endswith("-persistent")
    if kind.startswith("loader"):
        return iter(torch_data.loader(dataset, sampler, num_workers=2,
                                      persistent_workers=persistent))
    return iter(torch.utils.data.DataLoader(
        torch_data.TorchDataset(dataset), batch_sampler=sampler, num_workers=2,
        persistent_workers=persistent,
    ))


def main(kind: str, prefix: str, cache: str) -> None:
    config = mdc.GPTDataConfig(random_seed=1, sequence_length=256, eod_id=3, path_to_cache=cache)
    corpus = mdc.IndexedDataset(prefix)
    dataset = mdc.GPTDataset(corpus, np.arange(corpus.num_documents), 1_000_000, config)
    iterator = batches(kind, dataset)
    next(iterator)
    next(iterator)
    print("ready", flush=True)
    while True:  # mid-iteration until killed
        next(iterator)
        time.sleep(0.005)


if __name__ == "__main__":  # Grain's workers import this file again
    main(*sys.argv[1:])
