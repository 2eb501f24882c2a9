"""The Megatron drop-in under ``max_open_files``: a blend of 40 members whose .idx are
memory-mapped and whose index arrays are cached is built through
``BlendedMegatronDatasetBuilder`` and read sample by sample in a process whose descriptor
limit (64) is below what the members would hold open (~5 each), with the same samples
as an unbounded process. The collector is off: the bound holds without it, and a dropped
build's files close at once (no cycle keeps them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import megadata_core as mdc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd to count descriptors"
)

READER = textwrap.dedent(
    """
    import gc, hashlib, json, os, resource, sys, warnings
    import numpy as np

    gc.disable()

    directory, cache, limit, budget = sys.argv[1:5]
    if int(limit):
        resource.setrlimit(resource.RLIMIT_NOFILE, (int(limit), int(limit)))
    from megadata_adapters.trainers.megatron_datasets import (
        blended_megatron_dataset_builder as builder,
    )
    from megadata_adapters.trainers.megatron_datasets import gpt_dataset, megatron_cache

    class Tokenizer:
        eod, vocab_size = 0, 1000
        unique_identifiers = {"class": "Tokenizer", "eod": 0, "vocab_size": 1000}

    prefixes = sorted(
        os.path.join(directory, name[:-4]) for name in os.listdir(directory)
        if name.endswith(".idx")
    )
    config = gpt_dataset.GPTDatasetConfig(
        random_seed=5, sequence_length=16, blend=(prefixes, None), split="99,1,0",
        path_to_cache=cache, tokenizer=Tokenizer(), reset_position_ids=False,
        reset_attention_mask=False, eod_mask_loss=False, mid_level_dataset_surplus=0.005,
    )
    config.max_open_files = int(budget)
    baseline = len(os.listdir("/proc/self/fd"))
    digests, peak, left = [], 0, []
    for attempt in range(2):  # cold, then warm
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            train = builder.BlendedMegatronDatasetBuilder(
                gpt_dataset.GPTDataset, [4000, 40, 0], lambda: True, config
            ).build()[0]
        order = np.random.default_rng(attempt).permutation(len(train))[:400]
        for index in order.tolist():
            sample = train[index]
            digests.append(hashlib.sha256(sample["tokens"].numpy().tobytes()).hexdigest())
            peak = max(peak, len(os.listdir("/proc/self/fd")) - baseline)
        megatron_cache.flush()  # its background writer holds the build until done
        del train, sample
        left.append(len(os.listdir("/proc/self/fd")) - baseline)
    print(json.dumps({"digests": digests, "peak": peak, "left": left}))
    """
)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> str:
    directory = tmp_path_factory.mktemp("drop_in_members")
    rng = np.random.default_rng(23)
    for number in range(40):
        lengths = rng.integers(1, 9, 4600)  # .idx ~101 KiB; 4554 train documents
        tokens = rng.integers(1, 1000, int(lengths.sum())).astype(np.uint16)
        with mdc.IndexedDatasetWriter(str(directory / f"m{number:02d}"), np.uint16) as out:
            out.add_documents(tokens, lengths)
    return str(directory)


def _read(corpora: str, cache: str, limit: int, budget: int) -> dict:
    command = [sys.executable, "-c", READER, corpora, cache, str(limit), str(budget)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_the_drop_in_reads_a_blend_under_a_limit_of_64_descriptors(corpora, tmp_path):
    unbounded = _read(corpora, str(tmp_path / "free"), 0, 4096)
    assert unbounded["peak"] > 64
    bounded = _read(corpora, str(tmp_path / "bounded"), 64, 8)
    assert bounded["digests"] == unbounded["digests"]
    assert bounded["peak"] <= 8 + 12, bounded["peak"]
    assert max(bounded["left"]) <= 0, bounded["left"]  # every file closed with its build
