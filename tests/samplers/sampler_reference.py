"""Literal reference implementations (simple Python loops) of Megatron's samplers.

Transcribed from the algorithm in Megatron-LM ``megatron/training/data_samplers.py`` as
described in the seed documents; the random sampler takes the permutation function as a
parameter so it can run with our numpy seeding.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from megadata_core.samplers import PretrainingSampler


def megatron_pretraining(total, consumed, mbs, rank, dp, drop_last=True):
    """MegatronPretrainingSampler.__iter__, one sample at a time."""
    out = []
    batch = []
    start_idx, end_idx = rank * mbs, rank * mbs + mbs
    for idx in range(consumed, total):
        batch.append(idx)
        if len(batch) == mbs * dp:
            out.append(batch[start_idx:end_idx])
            batch = []
    if len(batch) > 0 and not drop_last:
        out.append(batch[start_idx:end_idx])
    return out


def numpy_perm(seed: int) -> Callable[[int, int], list]:
    """Our seeding: ``np.random.default_rng((seed, epoch)).permutation(n)``."""
    return lambda n, epoch: np.random.default_rng((seed, epoch)).permutation(n).tolist()


def megatron_random(total, consumed, mbs, rank, dp, data_sharding, perm):
    """One MegatronPretrainingRandomSampler.__iter__ (one epoch); returns
    (batches, consumed_samples after)."""
    g = mbs * dp
    last_batch_size = total % g
    active_total_samples = total - last_batch_size
    epoch = consumed // active_total_samples
    current_epoch_samples = consumed % active_total_samples
    assert current_epoch_samples % g == 0
    if data_sharding:
        bucket_size = (total // g) * mbs
        bucket_offset = current_epoch_samples // dp
        start_idx = rank * bucket_size
        random_idx = perm(bucket_size, epoch)
        idx_range = [start_idx + x for x in random_idx[bucket_offset:]]
    else:
        full_bucket_size = (total // mbs) * mbs
        full_bucket_offset = current_epoch_samples
        idx_range_total = perm(full_bucket_size, epoch)
        idx_range_active = idx_range_total[full_bucket_offset:]
        idx_range = idx_range_active[rank::dp]
    out = []
    batch = []
    for idx in idx_range:
        batch.append(idx)
        if len(batch) == mbs:
            consumed += g
            out.append(batch)
            batch = []
    return out, consumed


def steps(sampler, n: int) -> list[list[int]]:
    """The first ``n`` micro-batches of a sampler. A RandomSampler is iterated cyclically
    (Megatron's ``cyclic_iter``: a new ``iter()`` whenever one ends); a
    PretrainingSampler makes one pass (each of its ``iter()`` restarts, as Megatron's)."""
    if isinstance(sampler, PretrainingSampler):
        return list(itertools.islice(iter(sampler), n))

    def cyclic():
        while True:
            yield from sampler

    return list(itertools.islice(cyclic(), n))


def global_steps(make, dp: int, n: int) -> list[list[int]]:
    """Per step, the ranks' micro-batches concatenated in rank order.

    ``make(rank)`` builds rank ``rank``'s sampler."""
    per_rank = [steps(make(rank), n) for rank in range(dp)]
    assert all(len(r) == len(per_rank[0]) for r in per_rank)
    return [sum((per_rank[r][t] for r in range(dp)), []) for t in range(len(per_rank[0]))]
