"""Raw-shards blend members (``megadata_core.RawShards``) through every adapter: Grain
(``GrainSource``, its DataLoader with workers and checkpoints, ``batched_dataset`` resumed
across worker counts and DP layouts), torch (``TorchDataset`` with megadata's samplers,
worker processes started by fork and by spawn that read pieces from the cache while this
process tokenizes, DP ranks, resume), MaxText's JSON data config (``ConfiguredSource``),
torchtitan's loader (where torchtitan imports) and the ml_collections config path.

Every sample of a raw member is a pure function of the config, the seed and the shards,
so a reference dataset tokenized to the end (in a cache of its own) gives the expected
batches of a pipeline that reads while a slow tokenizer is still at work.

Module-level imports stay light (no grain, torch or jax): spawned workers import this
module to rebuild :class:`SlowBytes`.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from adapter_helpers import deadline, write_corpus

import megadata_core as mdc
from megadata_core.errors import DataError
from megadata_core.preprocess import ByteTokenizer

SEQ = 64
EOD = 256  # ByteTokenizer's
BYTES = {"type": "bytes"}
PIECE = 32 << 10
WINDOW = 4
SPLIT = "90,10,0"
WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota",
         "kappa", "lambda", "mu", "Ärger", "東京", "naïve")


class SlowBytes(ByteTokenizer):
    """ByteTokenizer's ids, ``delay`` seconds per text: a background tokenizer slow enough
    that readers (and worker processes) ask for pieces it has not made yet."""

    def __init__(self, delay: float = 0.001) -> None:
        self.delay = delay

    def encode(self, text: str) -> np.ndarray:
        time.sleep(self.delay)
        return super().encode(text)

    def __repr__(self) -> str:
        return f"SlowBytes({self.delay})"


def slow_factory(delay: float = 0.001):
    return functools.partial(SlowBytes, delay)


def _write_shards(directory, count: int = 3, size: int = 100_000, seed: int = 0) -> str:
    """``count`` JSON-lines shards of about ``size`` bytes each; their glob."""
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    for k in range(count):
        lines, total = [], 0
        while total < size:
            words = rng.choice(WORDS, int(rng.integers(1, 80)))
            line = json.dumps({"text": f"{k}:{len(lines)} " + " ".join(words), "id": total})
            lines.append(line + "\n")
            total += len(lines[-1].encode())
        with open(os.path.join(directory, f"shard{k}.jsonl"), "w", encoding="utf-8") as f:
            f.writelines(lines)
    return os.path.join(str(directory), "shard*.jsonl")


def raw_shards(paths, tokenizer=BYTES, **options) -> mdc.RawShards:
    options = {"window": WINDOW, "piece_size": PIECE, "workers": 1, **options}
    return mdc.RawShards(paths, tokenizer, **options)


def gpt_config(members, weights, cache, seed: int = 1, **fields) -> mdc.GPTDataConfig:
    return mdc.GPTDataConfig(random_seed=seed, sequence_length=SEQ, blend=(members, weights),
                             split=SPLIT, path_to_cache=str(cache), eod_id=EOD,
                             create_attention_mask=False, **fields)


def build(members, weights, cache, sizes, seed: int = 1, **fields):
    return mdc.build_datasets(gpt_config(members, weights, cache, seed, **fields), sizes)


def _equal(a, b) -> None:
    a = {key: np.asarray(value) for key, value in a.items()}
    b = {key: np.asarray(value) for key, value in b.items()}
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def _stack(dataset, indices) -> dict:
    samples = [dataset[int(i)] for i in indices]
    return {key: np.stack([np.asarray(s[key]) for s in samples]) for key in samples[0]}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The shards, a prefix corpus, and reference datasets tokenized to the end."""
    root = tmp_path_factory.mktemp("raw_adapters")
    shards = _write_shards(root / "shards")
    prefix = write_corpus(str(root / "corpus"), seed=0, documents=200)
    cache = root / "reference_cache"
    raw_train = build([raw_shards(shards)], None, cache, [4000, 50, None])[0]
    blend = build([raw_shards(shards), prefix], [0.5, 0.5], cache, [600, 40, None])[0]
    return {"root": root, "shards": shards, "prefix": prefix, "raw": raw_train,
            "blend": blend}


def test_reference_datasets_are_raw_members(data):
    assert isinstance(data["raw"], mdc.RawShardsDataset) and len(data["raw"]) == 4000
    assert isinstance(data["blend"], mdc.BlendedDataset)
    assert isinstance(data["blend"].datasets[0], mdc.RawShardsDataset)
    # a raw member spans several windows, so readers below cross windows (and pieces)
    assert data["raw"]._per_epoch >= 3
    assert data["raw"].locate(np.array([3999]))[0][0] >= 2


# --- Grain ---------------------------------------------------------------------------------


def _grain():
    grain = pytest.importorskip("grain")
    return grain, pytest.importorskip("megadata_adapters.frameworks.grain_source")


@pytest.mark.parametrize("which", ["raw", "blend"])
def test_grain_source_reads_like_the_dataset(data, which):
    _, grain_source = _grain()
    dataset = data[which]
    src = grain_source.GrainSource(dataset)
    assert len(src) == len(dataset)
    for i in (0, 7, len(dataset) // 2, len(dataset) - 1):
        _equal(src[i], dataset[i])
    indices = [3, len(dataset) - 2, 11, 0]
    _equal(src.__getitems__(indices), _stack(dataset, indices))
    _equal(src._getitems(indices)[1], dataset[indices[1]])
    sample = src[5]
    assert all(value.flags.writeable for value in sample.values())
    clone = pickle.loads(pickle.dumps(src))  # what a Grain worker gets
    assert repr(clone) == repr(src)
    _equal(clone.__getitems__(indices), src.__getitems__(indices))
    assert len(pickle.dumps(src)) < 64 << 10


def _grain_loader(grain, src, worker_count: int):
    sampler = grain.samplers.IndexSampler(
        num_records=len(src), shard_options=grain.sharding.NoSharding(), shuffle=True,
        num_epochs=1, seed=5)
    return grain.DataLoader(data_source=src, sampler=sampler, worker_count=worker_count,
                            operations=[grain.transforms.Batch(batch_size=4,
                                                               drop_remainder=True)])


@deadline(120)
def test_grain_data_loader_with_workers_over_a_blend_restores_exactly(data, tmp_path):
    """A worker process reads a blend whose raw member a slow tokenizer is still making;
    one worker batches as the in-process loader does (Grain batches within a worker)."""
    grain, grain_source = _grain()
    blend = build([raw_shards(data["shards"], slow_factory()), data["prefix"]], [0.5, 0.5],
                  tmp_path / "cache", [600, 40, None])[0]
    reference = iter(_grain_loader(grain, grain_source.GrainSource(data["blend"]), 0))
    want = [next(reference) for _ in range(7)]
    assert {int(i) for batch in want for i in batch["dataset_id"]} == {0, 1}
    it = iter(_grain_loader(grain, grain_source.GrainSource(blend), 1))
    for expected in want[:3]:
        _equal(next(it), expected)
    state = it.get_state()
    del it
    it2 = iter(_grain_loader(grain, grain_source.GrainSource(blend), 1))
    it2.set_state(state)  # Grain compares the data source's repr here
    for expected in want[3:]:
        _equal(next(it2), expected)


@deadline(120)
def test_grain_batched_dataset_resumes_across_workers_and_layouts(data, tmp_path):
    grain, grain_source = _grain()
    raw = build([raw_shards(data["shards"], slow_factory())], None, tmp_path / "cache",
                [4000, 50, None])[0]
    want = [batch for _, batch in zip(range(10), iter(
        grain_source.batched_dataset(data["raw"], micro_batch_size=8)))]
    for step, batch in enumerate(want):  # PretrainingSampler's layout
        _equal(batch, data["raw"].__getitems__(list(range(step * 8, step * 8 + 8))))
    # two DP ranks, in-process, while the tokenizer runs: their halves make the DP-1 batch
    ranks = [iter(grain_source.batched_dataset(raw, micro_batch_size=4, data_parallel_rank=r,
                                               data_parallel_size=2)) for r in (0, 1)]
    for step in range(3):
        halves = [next(rank) for rank in ranks]
        _equal({key: np.concatenate([h[key] for h in halves]) for key in halves[0]},
               want[step])
    state = ranks[0].get_state()
    assert state["consumed_samples"] == 3 * 8
    # restored into a pipeline with a worker process and DP 1 (the same global batch)
    with iter(grain_source.batched_dataset(raw, micro_batch_size=8, worker_count=1)) as it:
        it.set_state(state)
        for expected in want[3:6]:
            _equal(next(it), expected)
        state = it.get_state()
    assert state["consumed_samples"] == 6 * 8
    # and back in-process, MaxText's keys
    it = iter(grain_source.batched_dataset(raw, micro_batch_size=8, key_names="maxtext"))
    it.set_state(state)
    from megadata_adapters.trainers.maxtext.keys import to_maxtext

    for expected in want[6:]:
        _equal(next(it), to_maxtext(expected))


def test_grain_state_of_other_seed_is_refused(data, tmp_path):
    _, grain_source = _grain()
    other = build([raw_shards(data["shards"])], None, tmp_path / "cache", [4000, 50, None],
                  seed=2)[0]
    assert other[0]["tokens"].tolist() != data["raw"][0]["tokens"].tolist()  # other data
    it = iter(grain_source.batched_dataset(data["raw"], micro_batch_size=8))
    next(it)
    state = it.get_state()
    with pytest.raises(DataError, match="fingerprint"):
        iter(grain_source.batched_dataset(other, micro_batch_size=8)).set_state(state)


# --- torch ---------------------------------------------------------------------------------


def _torch():
    torch = pytest.importorskip("torch")
    return torch, pytest.importorskip("megadata_adapters.frameworks.torch_data")


def _sampler(kind: str, total: int, consumed: int, mbs: int, rank: int = 0, dp: int = 1):
    from megadata_core.samplers import PretrainingSampler, RandomSampler

    if kind == "pretraining":
        return PretrainingSampler(total, consumed, mbs, rank, dp)
    return RandomSampler(total, consumed, mbs, rank, dp, seed=3)


def _numpy(batch) -> dict:
    return {key: value.numpy() for key, value in batch.items()}


def _batches(dataset, sampler, count: int, **loader_options) -> list[dict]:
    from torch.utils.data import DataLoader

    torch_data = pytest.importorskip("megadata_adapters.frameworks.torch_data")
    loader = DataLoader(torch_data.TorchDataset(dataset), batch_sampler=sampler,
                        **loader_options)
    out = []
    for batch in loader:
        out.append(_numpy(batch))
        if len(out) == count:
            break
    return out


def _expected(dataset, kind: str, count: int, mbs: int = 8, consumed: int = 0, *,
              rank: int = 0, dp: int = 1) -> list[dict]:
    """The core's batches (torch's dtypes) of a rank's first ``count`` micro-batches."""
    _, torch_data = _torch()
    sampler = _sampler(kind, len(dataset), consumed, mbs, rank, dp)
    out = []
    for indices in sampler:
        out.append(_numpy(torch_data.to_torch(dataset.__getitems__(indices))))
        if len(out) == count:
            break
    return out


def _check(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for batch, expected in zip(got, want):
        _equal(batch, expected)


@deadline(180)
@pytest.mark.parametrize("kind", ["pretraining", "random"])
def test_torch_batches_equal_across_workers_dp_and_resume(data, tmp_path, kind):
    """num_workers 0 and 2 (spawned: they rebuild SlowBytes from this module and read the
    pieces from the cache while this process tokenizes; PretrainingSampler's spawned
    workers run in the StatefulLoader test, forked ones in the fork test), DP 1 and 2,
    resume."""
    torch, torch_data = _torch()
    raw = build([raw_shards(data["shards"], slow_factory())], None, tmp_path / "cache",
                [4000, 50, None])[0]
    want = _expected(data["raw"], kind, 24)
    assert raw.corpus.complete() is False  # still tokenizing: the readers below wait
    if kind == "random":
        spawned = {"num_workers": 2, "multiprocessing_context": "spawn"}
        _check(_batches(raw, _sampler(kind, len(raw), 0, 8), 24, **spawned), want)
    _check(_batches(raw, _sampler(kind, len(raw), 0, 8), 24), want)
    # DP 2: each rank's batches are the core's samples its sampler names; with
    # PretrainingSampler, step t of rank 0 then rank 1 is step t of DP 1
    halves = [_batches(raw, _sampler(kind, len(raw), 0, 4, rank, 2), 24) for rank in (0, 1)]
    for rank, half in enumerate(halves):
        _check(half, _expected(data["raw"], kind, 24, 4, rank=rank, dp=2))
    if kind == "pretraining":
        for step, expected in enumerate(want):
            _equal({key: np.concatenate([halves[0][step][key], halves[1][step][key]])
                    for key in expected}, expected)
    # resume from consumed_samples (a sampler made at that count), DP 1 and DP 2
    _check(_batches(raw, _sampler(kind, len(raw), 10 * 8, 8), 14), want[10:])
    _check(_batches(raw, _sampler(kind, len(raw), 10 * 8, 4, 1, 2), 14), halves[1][10:])


@deadline(180)
def test_torch_stateful_loader_with_spawned_workers_resumes(data, tmp_path):
    torch, torch_data = _torch()
    blend = build([raw_shards(data["shards"], slow_factory()), data["prefix"]], [0.5, 0.5],
                  tmp_path / "cache", [600, 40, None])[0]
    want = _expected(data["blend"], "pretraining", 12, mbs=6)
    assert set(want[0]) >= {"tokens", "labels", "loss_mask", "position_ids", "dataset_id"}
    options = {"num_workers": 1, "multiprocessing_context": "spawn"}
    with torch_data.StatefulLoader(blend, _sampler("pretraining", len(blend), 0, 6),
                                   **options) as loader:
        got = []
        for batch in loader:
            got.append(_numpy(batch))
            if len(got) == 5:
                state = loader.state_dict()
                break
    _check(got, want[:5])
    assert state["consumed_samples"] == 5 * 6
    resumed = torch_data.StatefulLoader(blend, _sampler("pretraining", len(blend), 0, 6))
    resumed.load_state_dict(state)
    _check([_numpy(b) for _, b in zip(range(7), resumed)], want[5:])


_FORK_RUN = textwrap.dedent("""
    import sys
    import numpy as np
    import test_raw_shards_adapters as t
    from torch.utils.data import DataLoader
    from megadata_adapters.frameworks import torch_data

    cache, shards, out = sys.argv[1:4]
    raw = t.build([t.raw_shards(shards, t.slow_factory())], None, cache, [4000, 50, None])[0]
    assert not raw.corpus.complete()
    arrays = {}
    for kind in ("pretraining", "random"):
        for rank, dp, mbs in ((0, 1, 8), (1, 2, 4)):
            sampler = t._sampler(kind, len(raw), 0, mbs, rank, dp)
            loader = DataLoader(torch_data.TorchDataset(raw), batch_sampler=sampler,
                                num_workers=2, multiprocessing_context="fork")
            for step, batch in zip(range(16), loader):
                for key, value in batch.items():
                    arrays[f"{kind}/{dp}/{step}/{key}"] = value.numpy()
            del loader
    np.savez(out, **arrays)
""")


@deadline(180)
def test_torch_forked_workers_read_while_the_parent_tokenizes(data, tmp_path):
    """Forked workers inherit a process whose producer thread is running (in a fresh
    interpreter: this one may hold JAX's threads, which a fork can deadlock on)."""
    _torch()
    here = os.path.dirname(os.path.abspath(__file__))
    helpers = os.path.join(os.path.dirname(here), "helpers")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [here, helpers, os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "batches.npz"
    done = subprocess.run(
        [sys.executable, "-c", _FORK_RUN, str(tmp_path / "cache"), data["shards"], str(out)],
        env=env, capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stderr[-3000:]
    got = np.load(out)
    for kind in ("pretraining", "random"):
        for dp, expected in ((1, _expected(data["raw"], kind, 16)),
                             (2, _expected(data["raw"], kind, 16, 4, rank=1, dp=2))):
            for step, batch in enumerate(expected):
                for key, value in batch.items():
                    np.testing.assert_array_equal(got[f"{kind}/{dp}/{step}/{key}"], value,
                                                  err_msg=f"{kind} DP {dp} step {step} {key}")


@deadline(120)
def test_torch_workers_become_the_producer_when_none_runs(data, tmp_path):
    """This process stops its producer; a spawned worker that needs a piece not made yet
    finds no producer alive and makes it."""
    _torch()
    raw = build([raw_shards(data["shards"], slow_factory())], None, tmp_path / "cache",
                [4000, 50, None])[0]
    raw.corpus.stop()
    assert not raw.corpus.complete()
    want = _expected(data["raw"], "random", 8)
    got = _batches(raw, _sampler("random", len(raw), 0, 8), 8, num_workers=1,
                   multiprocessing_context="spawn")
    _check(got, want)


def test_torch_state_of_other_seed_is_refused(data, tmp_path):
    _, torch_data = _torch()
    other = build([raw_shards(data["shards"])], None, tmp_path / "cache", [4000, 50, None],
                  seed=2)[0]
    loader = torch_data.StatefulLoader(data["raw"], _sampler("pretraining", 4000, 0, 8))
    next(iter(loader))
    state = loader.state_dict()
    with pytest.raises(DataError, match="fingerprint"):
        torch_data.StatefulLoader(other, _sampler("pretraining", 4000, 0, 8)).load_state_dict(
            state)


# --- MaxText's JSON data config ------------------------------------------------------------


def _data_json(data, path, **extra) -> str:
    member = {"raw": data["shards"], "tokenizer": BYTES, "window": WINDOW, "piece_size": PIECE,
              "workers": 1}
    values = {"blend": [[member, data["prefix"]], [0.5, 0.5]], "split": SPLIT,
              "path_to_cache": str(path.parent / "cache"), **extra}
    path.write_text(json.dumps(values))
    return str(path)


MAXTEXT_KEYS = {"inputs", "targets", "inputs_position", "targets_position",
                "inputs_segmentation", "targets_segmentation"}


@deadline(120)
def test_maxtext_data_config_with_a_raw_member(data, tmp_path):
    pytest.importorskip("grain")
    from megadata_adapters.trainers.maxtext.keys import data_config, to_maxtext
    from megadata_adapters.trainers.maxtext.source import ConfiguredSource, get_mmap_npy_dataset

    path = _data_json(data, tmp_path / "data.json")
    config, extras = data_config(path, SEQ, EOD, seed=1)
    assert isinstance(config.blend[0][0], mdc.RawShards)
    source = ConfiguredSource(config, 600, 0, extras)
    assert len(source) == 600
    reference = data["blend"]
    for i in (0, 1, 63, 64, 599):
        sample = source[i]
        assert MAXTEXT_KEYS <= set(sample)
        want = to_maxtext(reference.__getitems__([i]))
        for key in MAXTEXT_KEYS:
            np.testing.assert_array_equal(sample[key], np.asarray(want[key])[0], err_msg=key)
    clone = pickle.loads(pickle.dumps(source))  # a Grain worker rebuilds it from the cache
    np.testing.assert_array_equal(clone[5]["inputs"], source[5]["inputs"])
    # the hook's entry point, as MaxText calls it (grain_train_files: data.json), two hosts
    hosts = []
    for host in (0, 1):
        dataset = get_mmap_npy_dataset(
            path, False, SEQ, EOD, 1, host, 2, 1, 2, None, None, "train", None,
            num_samples=600, seed=1)
        hosts.append([element for _, element in zip(range(6), iter(dataset))])
    for host, elements in enumerate(hosts):
        for step, element in enumerate(elements):
            assert MAXTEXT_KEYS <= set(element)
            assert element["inputs"].shape == (SEQ,)
            want = to_maxtext(reference.__getitems__([2 * step + host]))
            np.testing.assert_array_equal(element["inputs"], np.asarray(want["inputs"])[0])
            np.testing.assert_array_equal(element["targets_segmentation"],
                                          np.asarray(want["targets_segmentation"])[0])


# --- torchtitan ----------------------------------------------------------------------------


def _torchtitan():
    pytest.importorskip("torch")
    try:
        import torchtitan  # noqa: F401

        from megadata_adapters.trainers import torchtitan as tt
    except Exception as error:  # noqa: BLE001 - ImportError, or a dependency's failure
        pytest.skip(f"torchtitan is not importable here ({error!r}); see "
                    "tests/trainers/torchtitan_site/README.md")
    return tt


class _TitanTokenizer:
    eos_id = EOD

    def get_vocab_size(self) -> int:
        return 257


@deadline(120)
@pytest.mark.parametrize("workers", [0, 2])
def test_torchtitan_loader_with_a_raw_member(data, tmp_path, workers):
    tt = _torchtitan()
    path = _data_json(data, tmp_path / "data.json", train_samples=600, random_seed=1)

    def loader(rank: int = 0, world: int = 1, batch: int = 4):
        config = tt.MegadataDataLoader.Config(dataset_path=path, num_workers=workers)
        return config.build(dp_world_size=world, dp_rank=rank, tokenizer=_TitanTokenizer(),
                            seq_len=SEQ, local_batch_size=batch, snapshot_every_n_steps=1)

    want = _expected(data["blend"], "pretraining", 8, mbs=4)
    first = loader()
    iterator = iter(first)
    for step in range(3):
        inputs, labels = next(iterator)
        np.testing.assert_array_equal(inputs["input"].numpy(), want[step]["tokens"])
        np.testing.assert_array_equal(inputs["positions"].numpy(), want[step]["position_ids"])
        expected = np.where(want[step]["loss_mask"] == 0, tt.IGNORE_INDEX,
                            want[step]["labels"])
        np.testing.assert_array_equal(labels.numpy(), expected)
    state = first.state_dict()
    first.close()
    # resumed on two DP ranks (local batch 2: the same global batch)
    ranks = [loader(rank, 2, 2) for rank in (0, 1)]
    for rank in ranks:
        rank.load_state_dict(state)
    iterators = [iter(rank) for rank in ranks]
    for step in range(3, 6):
        halves = [next(it)[0]["input"].numpy() for it in iterators]
        np.testing.assert_array_equal(np.concatenate(halves), want[step]["tokens"])
    for rank in ranks:
        rank.close()


# --- the ml_collections config path --------------------------------------------------------


def _ml_collections():
    ml_collections = pytest.importorskip("ml_collections")
    return ml_collections, pytest.importorskip("megadata_cli.data_config")


def _member(data) -> dict:
    return {"raw": data["shards"], "tokenizer": BYTES, "window": WINDOW, "piece_size": PIECE,
            "workers": 1}


@pytest.mark.parametrize("form", ["dict", "ConfigDict"])
def test_ml_collections_config_with_a_raw_member(data, tmp_path, form):
    ml_collections, data_config = _ml_collections()
    config = data_config.base_config()
    member = _member(data) if form == "dict" else ml_collections.ConfigDict(_member(data))
    config.blend = ([member, data["prefix"]], [0.5, 0.5])
    config.split = SPLIT
    config.random_seed = 1
    config.sequence_length = SEQ
    config.eod_id = EOD
    config.create_attention_mask = False
    config.path_to_cache = str(tmp_path / "cache")
    config.train_samples, config.valid_samples = 600, 40
    gpt, sizes, extras = data_config.to_gpt_config(config)
    assert isinstance(gpt.blend[0][0], mdc.RawShards) and gpt.blend[0][1] == data["prefix"]
    assert sizes == [600, 40, None] and extras["mock"] is False
    train, valid, test = mdc.build_datasets(gpt, sizes)
    assert test is None and len(valid) == 40
    reference = data["blend"]
    indices = [0, 9, 333, 599]
    _equal(train.__getitems__(indices), reference.__getitems__(indices))


def test_ml_collections_blend_and_data_path_are_exclusive(data):
    _, data_config = _ml_collections()
    config = data_config.base_config()
    config.blend = ([_member(data)], None)
    config.data_path = data["prefix"]
    with pytest.raises(DataError, match="blend"):
        data_config.to_gpt_config(config)


def test_a_data_path_flag_replaces_a_config_blend_with_a_raw_member(data, tmp_path):
    """megadata-build-index: ``--data_path`` replaces the config's whole blend, its
    ``config.blend`` pair (raw member and all) included."""
    _ml_collections()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    config = tmp_path / "config.py"
    config.write_text(textwrap.dedent(f"""
        from megadata_cli.data_config import base_config

        def get_config():
            c = base_config()
            c.blend = ([{_member(data)!r}, {data["prefix"]!r}], [0.5, 0.5])
            c.split = {SPLIT!r}
            c.sequence_length = {SEQ}
            c.eod_id = {EOD}
            c.path_to_cache = {str(tmp_path / "cache")!r}
            c.train_samples, c.valid_samples = 600, 40
            return c
    """))
    done = subprocess.run(
        [sys.executable, os.path.join(root, "tools", "build_index.py"), "--noprogress",
         f"--config={config}", f"--data_path={data['prefix']}", f"--split={SPLIT}",
         "--dry_run"],
        capture_output=True, text=True, timeout=120, cwd=root,
        env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "from 1 dataset(s)" in done.stdout and "raw:" not in done.stdout
