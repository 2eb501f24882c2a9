"""Cache keys are part of the on-disk format: caches written by earlier versions stay valid.

The entry names below were written by megadata at commit 291d0d8 (before the cache got a
room of its own) for fixed corpora and configs. A change that alters any description,
and so any key, makes an existing cache miss and rebuild everything; it must come with
a version bump of its own (and a change of this table), never by accident. Each case is
then built again to check that the second build is a pure hit: no entry added, no
warning.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from corpora import write_corpus

import megadata_core as mdc

CASES = {
    "blend_concat": dict(blend=(["c0", "c1", "c2"], [0.5, 0.3, 0.2]), split="90,5,5"),
    "single_feistel": dict(blend=(["c1"], None), split="90,5,5", shuffle="feistel"),
    "single_best_fit": dict(blend=(["c2"], None), split="90,5,5", packing="best_fit"),
    "blend_best_fit": dict(blend=(["c0", "c2"], [1, 1]), split="90,5,5", packing="best_fit"),
}
KEYS = {
    "blend_concat": [
        "3cf7761864cf25d0097358aa6798652af0b867e16dd97f119842c6410b89c10b-train",
        "57a35558292dd89929dbe79b804f2f90ea4f8d69eb171a6b120d540a631d9b38-train",
        "eafc50f94061549ff94422159e830f6a87efb46f75d6326db100bf54c7fe6963-bundle",
        "f3d621cd609ed0e17765fff19e916eb9d17a0f58aba6b4497c51b884c2cbbef3-blend",
    ],
    "single_feistel": ["25f078811f0dc9ddcadad73ce119dc31ef633fd46f6db8ee450919b1db0ec94a-train"],
    "single_best_fit": [
        "0ce87b39fc26b55cf0fa5a2c3cd1fb5672d5dbed8702da180522cecf09a7cd4d-train"
    ],
    "blend_best_fit": [
        "c79c5b1cb077135f3425ee2211051eba43e4180cb696f89f726c3a751873fcce-train",
        "d1eb2b40a2f1d81844e182ae1c0003d73ff13317b25375005797074d040afb41-blend",
        "e76777078945ee262782edba30981feff83c325af05ad772d1df79a6e9123373-bundle",
    ],
    "direct": [  # GPTDatasets and a BlendedDataset made by hand, not by the builder
        "0c9643073a93c0be5f13ebbc492b7c21d7abcab78fcb69f57ad938ec2eac37d0-valid",
        "bc67941ebbd054e56e7537324ef6779cc836e48def474396ab4f6246c3035a96-train",
        "bc894394fb6bf2178cd6bc16dbe5570599a5af48b0ea79255b38237bbc32c263-valid",
        "f62380dfef1e11df4b4b5ffe5d5a8a1fa0dd484c1dc5be6a666382b19120d3eb-valid",
    ],
}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """Three corpora, named by relative prefixes (the blend record's key holds the
    prefixes as given) in a directory of their own."""
    directory = tmp_path_factory.mktemp("corpora")
    for number, documents in enumerate([300, 5000, 9000]):
        rng = np.random.default_rng(number)
        write_corpus(str(directory / f"c{number}"), rng.integers(1, 40, documents), rng, low=4,
                     vocab=500, one_document=True)
    return directory


def _entries(directory: str) -> list[str]:
    suffix = "-description.json"
    return sorted(name[: -len(suffix)] for name in os.listdir(directory) if name.endswith(suffix))


def _build_twice(build, directory: str) -> list[str]:
    build()
    first = _entries(directory)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build()
    assert _entries(directory) == first  # the second build was a hit
    return first


@pytest.mark.parametrize("case", sorted(CASES))
def test_builder_keys_are_those_of_earlier_versions(corpora, monkeypatch, case):
    monkeypatch.chdir(corpora)
    config = mdc.GPTDataConfig(
        random_seed=7, sequence_length=16, eod_id=0, path_to_cache=f"cache_{case}",
        **CASES[case],
    )
    entries = _build_twice(lambda: mdc.build_datasets(config, [2000, 100, 10]), f"cache_{case}")
    assert entries == KEYS[case]


def test_dataset_keys_are_those_of_earlier_versions(corpora, monkeypatch):
    monkeypatch.chdir(corpora)
    config = mdc.GPTDataConfig(
        random_seed=7, sequence_length=16, eod_id=0, path_to_cache="cache_direct"
    )

    def build() -> None:
        mdc.GPTDataset(mdc.IndexedDataset("c1"), range(0, 5000), 3000, config, "train")
        corpus = mdc.IndexedDataset("c2")
        odd = mdc.GPTDataset(corpus, np.arange(0, 9000, 2), 3000, config, "valid")
        head = mdc.GPTDataset(corpus, np.arange(0, 4000), 3000, config, "valid")
        mdc.BlendedDataset([odd, head], [0.5, 0.5], 4000, config)

    assert _build_twice(build, "cache_direct") == KEYS["direct"]
