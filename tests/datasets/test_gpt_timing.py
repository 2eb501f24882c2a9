"""Quick timing, printed and never asserted: batched reads against megatron-core's loop.

Run ``pytest -s -p no:xdist tests/datasets/test_gpt_timing.py`` (or this file with python)
to see the numbers. Corpus: ~50M uint16 tokens, documents ~lognormal (median ~700
tokens); batches of 32 random samples of 4096 + 1 tokens; keys tokens, labels,
loss_mask, position_ids (create_attention_mask=False).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import warnings

import numpy as np
from gpt_oracle import OracleTokenizer

import megadata_core as mdc
from megadata_core.datasets import reading

TOKENS = 50_000_000
SEQUENCE = 4096
BATCH = 32


def _corpus(directory: str) -> str:
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(6.5, 1.0, TOKENS // 500), 1, 50_000).astype(np.int64)
    lengths = lengths[np.cumsum(lengths) <= TOKENS]
    prefix = os.path.join(directory, "corpus")
    with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
        writer.add_document(rng.integers(1, 50_000, int(lengths.sum()), dtype=np.uint16), lengths)
    return prefix


def _median_ms(function, batches) -> float:
    times = []
    for batch in batches:
        start = time.perf_counter()
        function(batch)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def run_timing(directory: str) -> dict[str, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch
        from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
        from megatron.core.datasets.indexed_dataset import IndexedDataset
        from megatron.core.datasets.utils import Split
    torch.set_num_threads(1)  # megatron's fastest setting for per-sample tensors
    prefix = _corpus(directory)
    flags = dict(
        random_seed=1,
        sequence_length=SEQUENCE,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
    )
    indexed = mdc.IndexedDataset(prefix)
    ours = mdc.GPTDataset(
        indexed, np.arange(len(indexed)), None, mdc.GPTDataConfig(eod_id=0, **flags)
    )
    config = GPTDatasetConfig(
        blend=([prefix], None),
        split="1,0,0",
        path_to_cache=os.path.join(directory, "megatron_cache"),
        tokenizer=OracleTokenizer(0, vocab_size=50_000),
        **flags,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = GPTDataset(
            IndexedDataset(prefix),
            prefix,
            np.arange(len(indexed), dtype=np.int32),
            None,
            Split.train,
            config,
        )
    flat = reading.flat_tokens(indexed)
    width = SEQUENCE + 1

    def piece_copy(batch):  # the same bytes, copied slice by slice into one buffer
        rows = np.asarray(ours.shuffle_index[batch], dtype=np.int64)
        pieces = reading.locate_pieces(
            ours.sample_index, ours.document_index, indexed.sequence_lengths, rows, 1
        )
        starts = indexed.sequence_pointers[pieces.document] // 2 + pieces.start
        out, at = np.empty(BATCH * width, np.uint16), 0
        for start, length in zip(starts.tolist(), pieces.length.tolist()):
            out[at : at + length] = flat[start : start + length]
            at += length
        return out

    def memcpy(batch):  # as many bytes, one contiguous copy
        start = int(batch[0]) * 3000
        return flat[start : start + BATCH * width].copy()

    rng = np.random.default_rng(1)
    draws = [rng.integers(0, len(ours), BATCH) for _ in range(160)]
    results = {"samples": len(ours)}
    for rounds in range(2):  # alternate, so neither side always reads cold pages first
        order = [
            ("ours", lambda batch: ours.__getitems__(batch)),
            ("ours_tokens", lambda batch: ours._text(ours._positions(batch))),
            ("megatron", lambda batch: [theirs[int(i)] for i in batch]),
            ("piece_copy", piece_copy),
            ("memcpy", memcpy),
        ]
        if rounds:
            order.reverse()
        for name, function in order:
            batches = draws[rounds * 80 : rounds * 80 + (20 if name == "megatron" else 80)]
            results.setdefault(name, []).append(_median_ms(function, batches))
    for name in ("ours", "ours_tokens", "megatron", "piece_copy", "memcpy"):
        results[name] = min(results[name])
    return results


def _report(results: dict) -> str:
    ours = results["ours"]
    return (
        f"__getitems__ of {BATCH} x {SEQUENCE + 1} tokens ({results['samples']} samples): "
        f"ours {ours:.3f} ms, megatron loop {results['megatron']:.3f} ms "
        f"({results['megatron'] / ours:.1f}x), raw piece copy {results['piece_copy']:.3f} ms "
        f"(ours at {results['piece_copy'] / ours:.2f}x its speed; ours' token gather alone "
        f"{results['ours_tokens']:.3f} ms, {results['piece_copy'] / results['ours_tokens']:.2f}x)"
        f", contiguous memcpy "
        f"{results['memcpy']:.3f} ms ({results['memcpy'] / ours:.2f}x)"
    )


def test_print_timing(tmp_path):
    print("\n" + _report(run_timing(str(tmp_path))))


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        print(_report(run_timing(scratch)))
