"""One ``path_to_cache`` shared by stock megatron-core and the drop-in, both ways: the
drop-in writes Megatron's cache files (a stock job then loads them and builds nothing),
reads a stock job's files only verified (once, then vouched for by a sidecar record),
serves nothing damaged, and defers the index arrays as ``defer_npy_index_mmap`` says."""

from __future__ import annotations

import dataclasses
import glob
import os
import warnings

import numpy as np
import pytest
from compat_helpers import FLAGS, Tokenizer, assert_same_sample, fresh_sample, ours, theirs

HOUR = 3600 * 10**9


@pytest.fixture(autouse=True, scope="module")
def one_rank():
    """A gloo group of one rank on 127.0.0.1: megatron-core 0.16.1's BlendedDataset asks
    torch.distributed for its rank on a cache miss."""
    import socket

    import torch

    if torch.distributed.is_initialized():
        yield
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    torch.distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        torch.distributed.destroy_process_group()


def _config(side, prefixes, cache, **changes):
    gpt = side("gpt_dataset")
    fields = dict(random_seed=3, sequence_length=16, path_to_cache=str(cache),
                  blend=(prefixes, [0.4, 0.6]), split="80,20,0", create_attention_mask=False,
                  tokenizer=Tokenizer(), **FLAGS)
    fields.update(changes)
    if fields.get("blend") is None:
        fields.pop("split", None)
    return gpt.GPTDatasetConfig(**fields)


def _build(side, config, sizes=(40, 12, 0), cls="GPTDataset"):
    """A build on ``side``; the drop-in's Megatron-layout files are written (its background
    writer flushed) before it returns."""
    builder = side("blended_megatron_dataset_builder").BlendedMegatronDatasetBuilder
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = builder(getattr(side("gpt_dataset"), cls), list(sizes), lambda: True,
                        config).build()
        ours("megatron_cache").flush()
    return built


def _files(cache) -> dict[str, tuple]:
    """Megatron's cache files: name -> (inode, mtime_ns)."""
    found = {}
    for path in glob.glob(os.path.join(str(cache), "*-*Dataset-*")):
        if path.endswith((".npy", ".txt")):
            status = os.stat(path)
            found[os.path.basename(path)] = (status.st_ino, status.st_mtime_ns)
    return found


def _backdate(cache) -> None:
    """As if written an hour ago (a check is recorded only for settled files)."""
    for path in glob.glob(os.path.join(str(cache), "*-*Dataset-*.npy")):
        then = os.stat(path).st_mtime_ns - HOUR
        os.utime(path, ns=(then, then))


def _same_splits(left, right) -> None:
    for a, b in zip(left, right):
        assert (a is None) == (b is None)
        if a is None:
            continue
        assert len(a) == len(b)
        for index in range(len(a)):
            assert_same_sample(fresh_sample(a, index), b[index])


def _masking_kinds():
    reference = theirs("gpt_dataset").GPTDatasetConfig
    names = {field.name for field in dataclasses.fields(reference)}
    return [False, True] if "inter_document_masking" in names else [False]


@pytest.mark.parametrize("masking", _masking_kinds(), ids=lambda m: f"masking={m}")
def test_a_stock_cache_is_verified_then_vouched_for(corpora, tmp_path, masking):
    prefixes = corpora(2, seed=21)
    cache = tmp_path / "cache"
    extra = dict(inter_document_masking=True) if masking else {}
    stock = _build(theirs, _config(theirs, prefixes, cache, **extra))
    written = _files(cache)
    assert any(name.endswith("-GPTDataset-train-document_index.npy") for name in written)
    assert any(name.endswith("-BlendedDataset-valid-dataset_index.npy") for name in written)
    _backdate(cache)
    mine = _build(ours, _config(ours, prefixes, cache, **extra))
    _same_splits(stock, mine)
    assert {name: value[0] for name, value in _files(cache).items()} == {
        name: value[0] for name, value in written.items()}  # none rewritten
    records = glob.glob(os.path.join(str(cache), "*-megadata-verified.json"))
    assert len(records) == 6  # 2 corpora x 2 splits, 2 blends: each set checked once


def test_the_drop_ins_cache_is_a_warm_start_for_stock(corpora, tmp_path):
    prefixes = corpora(2, seed=22)
    cache = tmp_path / "cache"
    mine = _build(ours, _config(ours, prefixes, cache))
    written = _files(cache)
    assert len([name for name in written if name.endswith(".npy")]) == 4 * 3 + 2 * 2
    stock = _build(theirs, _config(theirs, prefixes, cache))
    assert _files(cache) == written  # stock loaded them: nothing built, nothing written
    _same_splits(stock, mine)
    for left, right in zip(stock[:2], mine[:2]):
        assert np.array_equal(left.dataset_index, right.dataset_index)
        for a, b in zip(left.datasets, right.datasets):
            for name in ("document_index", "sample_index", "shuffle_index"):
                assert np.array_equal(getattr(a, name), getattr(b, name)), name


def _per_split(prefixes):
    return dict(blend=None, blend_per_split=[(prefixes, [0.5, 0.5]), (prefixes[:1], None),
                                             None])


def test_deferred_indices_load_verified_at_the_first_sample(corpora, tmp_path):
    """megatron-core's fast_cache_load + defer_npy_index_mmap over a stock-prepared cache
    (tools/prepare_cache.py's way): nothing is loaded at build time, lengths are the
    stock ones, the first sample loads the verified files."""
    prefixes = corpora(2, seed=23)
    cache = tmp_path / "cache"
    sizes = (40, 12, 0)
    stock = _build(theirs, _config(theirs, prefixes, cache, **_per_split(prefixes)), sizes)
    _backdate(cache)
    fast = dict(fast_cache_load=True, defer_npy_index_mmap=True, **_per_split(prefixes))
    train, valid, _ = _build(ours, _config(ours, prefixes, cache, **fast), sizes)
    assert train.dataset_index is None and train.dataset_sample_index is None
    assert valid.document_index is None and valid.sample_index is None
    assert len(train) == len(stock[0]) and len(valid) == len(stock[1])
    assert_same_sample(fresh_sample(stock[0], 0), train[0])
    assert_same_sample(fresh_sample(stock[1], 0), valid[0])
    assert train.dataset_index is not None and valid.shuffle_index is not None
    assert valid.core._entry.startswith("Megatron cache ")  # served from the stock files
    for index in range(len(valid)):
        assert_same_sample(fresh_sample(stock[1], index), valid[index])


def test_damaged_stock_files_are_not_served(corpora, tmp_path):
    prefixes = corpora(2, seed=24)
    cache = tmp_path / "cache"
    sizes = (40, 12, 0)
    stock = _build(theirs, _config(theirs, prefixes, cache, **_per_split(prefixes)), sizes)
    _backdate(cache)
    (sample,) = glob.glob(os.path.join(str(cache), "*-GPTDataset-valid-sample_index.npy"))
    values = np.load(sample)
    values[len(values) // 2] += 1  # a sample that starts one token late
    with open(sample, "r+b") as stream:  # in place: same inode, new bytes
        stream.seek(os.path.getsize(sample) - values.nbytes)
        stream.write(values.tobytes())
    fast = dict(fast_cache_load=True, defer_npy_index_mmap=True, **_per_split(prefixes))
    valid = _build(ours, _config(ours, prefixes, cache, **fast), sizes)[1]
    with pytest.warns(UserWarning, match="sample_index.npy: differs"):
        first = valid[0]
    assert_same_sample(fresh_sample(stock[1], 0), first)  # megadata's own, right values
    assert not valid.core._entry
    for index in range(len(valid)):
        assert_same_sample(fresh_sample(stock[1], index), valid[index])


def test_the_shared_files_are_written_in_the_background_once(corpora, tmp_path, monkeypatch):
    """A large build (here: any, SYNC_BELOW 0) returns before its Megatron-layout files
    are written; flush() waits for them; a second build of the same config shares
    nothing again (its marker)."""
    prefixes = corpora(2, seed=25)
    cache = tmp_path / "cache"
    builder = ours("blended_megatron_dataset_builder").BlendedMegatronDatasetBuilder
    gpt = ours("gpt_dataset")
    cache_module = ours("megatron_cache")
    monkeypatch.setattr(cache_module, "SYNC_BELOW", 0)
    builder(gpt.GPTDataset, [40, 12, 0], lambda: True, _config(ours, prefixes, cache)).build()
    cache_module.flush()
    written = _files(cache)
    assert len([name for name in written if name.endswith(".npy")]) == 4 * 3 + 2 * 2
    markers = glob.glob(os.path.join(str(cache), "megadata-megatron-shared-*.json"))
    assert len(markers) == 1
    for path in glob.glob(os.path.join(str(cache), "*-GPTDataset-*.npy")):
        os.unlink(path)  # a second build of the config does not look again
    builder(gpt.GPTDataset, [40, 12, 0], lambda: True, _config(ours, prefixes, cache)).build()
    cache_module.flush()
    assert not glob.glob(os.path.join(str(cache), "*-GPTDataset-*.npy"))


def test_an_empty_path_to_cache_is_no_cache(corpora, tmp_path, monkeypatch):
    """Megatron reads ``path_to_cache=""`` as no cache (built in memory): nothing is
    written, not even lock files in the working directory."""
    prefixes = corpora(2, seed=26)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    splits = _build(ours, _config(ours, prefixes, ""))
    assert len(splits[0]) > 0
    assert os.listdir(work) == []
