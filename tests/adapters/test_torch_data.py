"""megadata_adapters.frameworks.torch_data: torch tensors with Megatron's dtypes, DataLoader with
megadata's
batch samplers (workers, DP ranks, resume), cheap pickling, blends, torch.distributed."""

from __future__ import annotations

import os
import pickle
import time

import numpy as np
import pytest
from adapter_helpers import write_corpus

import megadata_core as mdc
from megadata_core.samplers import PretrainingSampler, RandomSampler

torch = pytest.importorskip("torch")
torch_data = pytest.importorskip("megadata_adapters.frameworks.torch_data")

SEQ = 16
DTYPES = {
    "tokens": torch.long,
    "labels": torch.long,
    "position_ids": torch.long,
    "dataset_id": torch.int32,
    "loss_mask": torch.float32,
    "attention_mask": torch.bool,
}


def _context(num_workers: int) -> dict:
    """Workers start from a fork server: another test in this process may have started
    JAX's threads, and forking a multithreaded process can deadlock."""
    return {"multiprocessing_context": "forkserver"} if num_workers else {}


def _config(blend, cache, **kw):
    return mdc.GPTDataConfig(random_seed=7, sequence_length=SEQ, blend=blend, split="100,0,0",
                             path_to_cache=cache, eod_id=3, **kw)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("torch_data")
    return root, [write_corpus(str(root / f"corpus{i}"), seed=i) for i in range(2)]


@pytest.fixture(scope="module")
def train(corpora):
    root, prefixes = corpora
    config = _config(([prefixes[0]], None), str(root / "cache"))
    return mdc.build_datasets(config, [200, 0, 0], in_memory_below=0)[0]


@pytest.fixture(scope="module")
def blended(corpora):
    root, prefixes = corpora
    config = _config((prefixes, [0.3, 0.7]), str(root / "cache"))
    return mdc.build_datasets(config, [150, 0, 0], in_memory_below=0)[0]


def _expected(dataset, indices) -> dict:
    return dataset.__getitems__(list(indices))


def _assert_batch(batch: dict, want: dict) -> None:
    assert set(batch) == set(want)
    for key, value in want.items():
        assert batch[key].dtype == DTYPES[key], key
        np.testing.assert_array_equal(batch[key].numpy(), np.asarray(value), err_msg=key)


@pytest.mark.parametrize("options", [
    {"create_attention_mask": False},
    {"create_attention_mask": True, "eod_mask_loss": True, "reset_position_ids": True,
     "reset_attention_mask": True},
])
def test_values_and_dtypes_equal_the_core(corpora, options):
    root, prefixes = corpora
    config = _config(([prefixes[0]], None), str(root / "cache"), **options)
    core = mdc.build_datasets(config, [100, 0, 0])[0]
    dataset = torch_data.TorchDataset(core)
    assert len(dataset) == len(core)
    indices = [5, 0, 17, 5, len(core) - 1]
    batch = torch_data.batch_collate(dataset.__getitems__(indices))
    _assert_batch(batch, _expected(core, indices))
    assert ("attention_mask" in batch) == options["create_attention_mask"]
    for index in (0, 9):
        _assert_batch(dataset[index], core[index])
        _assert_batch(dataset[torch.tensor(index)], core[index])
    # the tensors own their memory: writing them leaves the core's arrays alone
    before = _expected(core, indices)
    before = {key: np.array(value) for key, value in before.items()}
    for tensor in batch.values():
        tensor.zero_()
    _assert_batch(torch_data.batch_collate(dataset.__getitems__(indices)), before)


def test_blended_dataset_ids(blended):
    dataset = torch_data.TorchDataset(blended)
    indices = list(range(0, len(blended), 7))
    batch = torch_data.batch_collate(dataset.__getitems__(indices))
    _assert_batch(batch, _expected(blended, indices))
    assert set(batch["dataset_id"].tolist()) == {0, 1}
    sample = dataset[3]
    assert sample["dataset_id"].dtype == torch.int32 and sample["dataset_id"].ndim == 0


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_reads_each_ranks_micro_batches(train, num_workers):
    mbs, dp = 3, 2
    per_rank = []
    for rank in range(dp):
        sampler = PretrainingSampler(len(train), 6, mbs, rank, dp)
        loader = torch_data.loader(train, sampler, num_workers=num_workers,
                                   persistent_workers=num_workers > 0, **_context(num_workers))
        batches = list(loader)
        wanted = list(iter(PretrainingSampler(len(train), 6, mbs, rank, dp)))
        assert len(batches) == len(wanted) == (len(train) - 6) // (mbs * dp)
        for batch, indices in zip(batches, wanted):
            _assert_batch(batch, _expected(train, indices))
        per_rank.append(batches)
    for step, (first, second) in enumerate(zip(*per_rank)):  # ranks together: the global batch
        start = 6 + step * mbs * dp
        joined = torch.cat([first["tokens"], second["tokens"]])
        want = _expected(train, range(start, start + mbs * dp))["tokens"]
        np.testing.assert_array_equal(joined.numpy(), want)


def test_blended_loader_with_random_sampler_and_workers(blended):
    sampler = RandomSampler(len(blended), 0, 4, 1, 2, data_sharding=False, seed=5)
    wanted = list(RandomSampler(len(blended), 0, 4, 1, 2, data_sharding=False, seed=5))
    batches = list(torch_data.loader(blended, sampler, num_workers=2, **_context(2)))
    assert len(batches) == len(wanted)
    for batch, indices in zip(batches, wanted):
        _assert_batch(batch, _expected(blended, indices))


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("kind", ["pretraining", "random"])
def test_resume_gives_exactly_the_following_batches(train, num_workers, kind):
    def sampler(consumed=0):
        if kind == "pretraining":
            return PretrainingSampler(len(train), consumed, 2, 1, 2)
        return RandomSampler(len(train), consumed, 2, 1, 2, seed=3)

    full = [batch["tokens"] for batch in torch_data.loader(train, sampler())]
    steps = 7
    loader = torch_data.StatefulLoader(
        train, sampler(), num_workers=num_workers, **_context(num_workers)
    )
    for step, batch in enumerate(loader):  # "train" k steps, then checkpoint
        assert torch.equal(batch["tokens"], full[step])
        if step + 1 == steps:
            state = loader.state_dict()
            break
    assert state["consumed_samples"] == steps * 4
    if num_workers == 0 and kind == "pretraining":  # no prefetch: the sampler's own count
        assert {**loader.batch_sampler.state_dict(), "fingerprint": loader.fingerprint} == state
    del loader
    resumed = sampler()
    resumed.load_state_dict(state)
    rest = [
        batch["tokens"]
        for batch in torch_data.loader(train, resumed, num_workers=2, **_context(2))
    ]
    assert len(rest) == len(full) - steps
    for got, want in zip(rest, full[steps:]):
        assert torch.equal(got, want)
    fresh = [b["tokens"] for b in torch_data.loader(train, sampler(state["consumed_samples"]))]
    assert all(torch.equal(a, b) for a, b in zip(fresh, full[steps:]))


def test_last_partial_batch_state(train):
    sampler = PretrainingSampler(len(train), 0, 3, 0, 2, drop_last=False)
    loader = torch_data.StatefulLoader(train, sampler)
    batches = list(loader)
    assert loader.state_dict()["consumed_samples"] == len(train)
    wanted = list(iter(PretrainingSampler(len(train), 0, 3, 0, 2, drop_last=False)))
    assert [len(b["tokens"]) for b in batches] == [len(w) for w in wanted]


def test_pickles_small(train, blended):
    for core in (train, blended):
        dataset = torch_data.TorchDataset(core)
        payload = pickle.dumps(dataset)
        assert len(payload) < 16_000, len(payload)  # memory maps travel as file names
        again = pickle.loads(payload)
        indices = [1, 4, 2]
        for key, value in dataset[indices].items():
            assert torch.equal(again[indices][key], value)


# -- two processes over torch.distributed (gloo, loopback) ------------------------------

def _distributed_rank(rank: int, world: int, init: str, prefix: str, cache: str, out: str):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        config = _config(([prefix], None), cache)
        if rank == 0:  # rank 0 builds the indices into the shared cache ...
            train = mdc.build_datasets(config, [120, 0, 0], in_memory_below=0)[0]
        dist.barrier()
        if rank != 0:  # ... the others load them
            train = mdc.build_datasets(config, [120, 0, 0], in_memory_below=0)[0]
        sampler = PretrainingSampler(len(train), 0, 2, rank, world)
        steps = []
        for batch in torch_data.loader(train, sampler, num_workers=1):
            gathered = [torch.empty_like(batch["tokens"]) for _ in range(world)]
            dist.all_gather(gathered, batch["tokens"])
            steps.append(torch.cat(gathered))
        torch.save(torch.stack(steps), os.path.join(out, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_two_ranks_with_torch_distributed(corpora, tmp_path, monkeypatch):
    import torch.multiprocessing as mp

    _, prefixes = corpora
    cache = str(tmp_path / "cache")
    init = f"file://{tmp_path / 'rendezvous'}"
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")  # loopback only
    mp.spawn(_distributed_rank, args=(2, init, prefixes[1], cache, str(tmp_path)), nprocs=2)
    config = _config(([prefixes[1]], None), cache)
    train = mdc.build_datasets(config, [120, 0, 0], in_memory_below=0)[0]
    built = sorted(name for name in os.listdir(cache) if name.endswith(".npy"))
    assert built and len(built) == len(set(built))  # one set of index files, built by rank 0
    results = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(2)]
    assert torch.equal(results[0], results[1])
    steps = len(train) // 4
    want = _expected(train, range(steps * 4))["tokens"].reshape(steps, 4, SEQ)
    np.testing.assert_array_equal(results[0].numpy(), want)


def test_batch_tensors_are_independent_and_reuse_memory(train):
    dataset = torch_data.TorchDataset(train)
    indices = [1, 4, 9]
    batch = torch_data.batch_collate(dataset.__getitems__(indices))
    want = {key: np.array(value) for key, value in _expected(train, indices).items()}
    _assert_batch(batch, want)
    pointers = {key: tensor.data_ptr() for key, tensor in batch.items()}
    for key, tensor in batch.items():  # no two keys share memory
        for other, second in batch.items():
            if key < other:
                assert not np.shares_memory(tensor.numpy(), second.numpy()), (key, other)
    batch["labels"].fill_(-5)
    rest = {key: value for key, value in want.items() if key != "labels"}
    _assert_batch({key: value for key, value in batch.items() if key != "labels"}, rest)
    again = torch_data.batch_collate(dataset.__getitems__(indices))  # batch held: fresh buffers
    assert all(again[key].data_ptr() != pointers[key] for key in batch)
    _assert_batch(again, want)
    del batch, again
    third = torch_data.batch_collate(dataset.__getitems__([2, 3, 5]))  # dropped: pooled again
    assert any(third[key].data_ptr() in pointers.values() for key in third)
    _assert_batch(third, _expected(train, [2, 3, 5]))


# -- packed hand-over: workers ship the text once, constants as recipes ---------------------

def _assert_owned(batch: dict) -> None:
    """Megatron's contract: contiguous, writable tensors, no two sharing memory."""
    for key, tensor in batch.items():
        assert tensor.is_contiguous(), key
        assert tensor.numpy().flags.writeable, key
        for other, second in batch.items():
            if key < other:
                assert not np.shares_memory(tensor.numpy(), second.numpy()), (key, other)


@pytest.mark.parametrize("options", [
    {"create_attention_mask": False},
    {"create_attention_mask": True},
    {"add_extra_token_to_sequence": False},
    {"create_attention_mask": True, "eod_mask_loss": True, "reset_position_ids": True,
     "reset_attention_mask": True},
])
def test_packed_batch_unpacks_to_the_core_batch(corpora, options):
    root, prefixes = corpora
    config = _config(([prefixes[0]], None), str(root / "cache"), **options)
    core = mdc.build_datasets(config, [60, 0, 0])[0]
    dataset = torch_data.TorchDataset(core)
    dataset._pack_in_worker = True  # what a loader's worker does
    indices = [3, 1, 4, 1, 5]
    packed = dataset.__getitems__(indices)
    assert isinstance(packed, torch_data.PackedBatch)
    want = {key: np.array(value) for key, value in _expected(core, indices).items()}
    again = pickle.loads(pickle.dumps(packed))  # the worker -> loader hand-over
    for batch in (packed.unpack(), again.unpack()):
        assert list(batch) == list(want)
        _assert_batch(batch, want)
        _assert_owned(batch)
    if options.get("add_extra_token_to_sequence", True):
        assert packed.text is not None and "tokens" not in packed.arrays
    if options == {"create_attention_mask": False}:
        # the core's all-ones loss mask and 0..S-1 position ids: no bytes sent
        assert set(packed.constants) == {"loss_mask", "position_ids"}
        assert set(packed.arrays) == set()
        assert len(pickle.dumps(packed)) < packed.text.nbytes + 2_000
    # a tensor written by the training loop changes nothing else
    batch = again.unpack()
    for tensor in batch.values():
        tensor.zero_()
    _assert_batch(again.unpack(), want)


def test_pin_memory_thread_unpacks(train, monkeypatch):
    from torch.utils.data._utils.pin_memory import pin_memory

    pinned = []

    def fake_pin(self):  # CPU-only torch cannot page-lock; record the call instead
        pinned.append(self.data_ptr())
        return self.clone()

    monkeypatch.setattr(torch.Tensor, "pin_memory", fake_pin)
    dataset = torch_data.TorchDataset(train)
    dataset._pack_in_worker = True
    indices = [7, 2, 9]
    batch = pin_memory(dataset.__getitems__(indices))  # what torch's pin thread does
    assert isinstance(batch, dict) and len(pinned) == len(batch)
    _assert_batch(batch, _expected(train, indices))
    _assert_owned(batch)


@pytest.mark.parametrize("kind", ["train", "blended"])
def test_loader_with_workers_unpacks_owned_batches(train, blended, kind):
    core = train if kind == "train" else blended
    sampler = PretrainingSampler(len(core), 0, 4, 0, 1)
    data = torch_data.loader(core, sampler, num_workers=2, **_context(2))
    assert isinstance(data, torch_data.UnpackingLoader)
    batches = list(data)
    wanted = list(iter(PretrainingSampler(len(core), 0, 4, 0, 1)))
    assert len(batches) == len(wanted)
    for batch, indices in zip(batches, wanted):
        _assert_batch(batch, _expected(core, indices))
        _assert_owned(batch)
    held = batches[:3]  # batches still held never share memory with one another
    pointers = [t.data_ptr() for batch in held for t in batch.values()]
    assert len(set(pointers)) == len(pointers)


def test_worker_text_travels_in_a_ring(train):
    """In a worker the text goes into the ring and the packed batch carries a SlotRef;
    unpacking reads it in place (and removes the ring's name once mapped)."""
    from megadata_core.handover.shm import ProducerRing, SlotRef

    dataset = torch_data.TorchDataset(train)
    dataset._pack_in_worker, dataset._ring = True, ProducerRing(2)
    for indices in ([7, 2, 9], [0, 1, 2], [5, 5, 3]):
        packed = pickle.loads(pickle.dumps(dataset.__getitems__(indices)))
        ref = packed.text
        assert isinstance(ref, SlotRef)
        assert len(pickle.dumps(packed)) < 2_000  # the text stays in the ring
        batch = packed.unpack()
        _assert_batch(batch, _expected(train, indices))
        _assert_owned(batch)
        assert not os.path.exists(ref.path)  # mapped here: the name is gone


@pytest.mark.parametrize("prefetch_factor", [1, 4])
def test_ring_reuse_across_epochs_and_prefetch_depths(train, prefetch_factor):
    """More batches than ring slots, over two epochs of persistent workers: every batch
    equals the core's (a slot is never reused before its batch was unpacked)."""
    sampler = PretrainingSampler(len(train), 0, 2, 0, 1)
    data = torch_data.loader(
        train, sampler, num_workers=2, persistent_workers=True,
        prefetch_factor=prefetch_factor, **_context(2),
    )
    wanted = list(iter(PretrainingSampler(len(train), 0, 2, 0, 1)))
    assert len(wanted) > 2 * (prefetch_factor * 2 + 2)
    for _ in range(2):
        batches = list(data)
        assert len(batches) == len(wanted)
        for batch, indices in zip(batches, wanted):
            _assert_batch(batch, _expected(train, indices))


def _uneven_workers(worker_id: int) -> None:
    """Worker 0 reads slowly: the others run ahead and batches arrive out of order."""
    if worker_id == 0:
        dataset = torch.utils.data.get_worker_info().dataset
        getitems = dataset.__getitems__

        def slow(indices):
            time.sleep(0.02)
            return getitems(indices)

        dataset.__getitems__ = slow


def test_ring_with_batches_returned_out_of_order(train):
    """in_order=False returns batches as they arrive, from workers running unevenly: every
    batch is still exactly one of the epoch's batches, each once."""
    sampler = PretrainingSampler(len(train), 0, 2, 0, 1)
    data = torch_data.loader(
        train, sampler, num_workers=2, prefetch_factor=1, in_order=False,
        worker_init_fn=_uneven_workers, **_context(2),
    )
    wanted = {tuple(indices): _expected(train, indices) for indices in iter(sampler)}
    def key_of(tokens) -> bytes:
        return np.asarray(tokens, dtype=np.int64).tobytes()

    by_tokens = {key_of(want["tokens"]): key for key, want in wanted.items()}
    seen = []
    for batch in data:
        key = by_tokens[key_of(batch["tokens"].numpy())]  # KeyError: a corrupted batch
        _assert_batch(batch, wanted[key])
        seen.append(key)
    assert sorted(seen) == sorted(wanted) and seen != list(wanted)  # all, once; reordered


def _mark_worker(worker_id: int) -> None:
    torch.utils.data.get_worker_info().dataset.marked = worker_id


def _collate_marks(batch: dict) -> dict:
    info = torch.utils.data.get_worker_info()
    batch = dict(torch.utils.data.default_collate(batch))  # a sequence of samples
    batch["worker"] = torch.tensor([getattr(info.dataset, "marked", -1)])
    return batch


def _touch(directory: str, worker_id: int) -> None:
    open(os.path.join(directory, f"worker{worker_id}"), "w").close()


def test_loader_keeps_user_worker_init_and_collate(train, tmp_path):
    import functools

    indices = list(iter(PretrainingSampler(len(train), 0, 2, 0, 1)))
    data = torch_data.loader(
        train, PretrainingSampler(len(train), 0, 2, 0, 1), num_workers=2,
        worker_init_fn=_mark_worker, collate_fn=_collate_marks, **_context(2),
    )
    assert not isinstance(data, torch_data.UnpackingLoader)  # a custom collate: samples
    for batch, want in zip(data, indices):
        assert batch["worker"].item() in (0, 1)
        _assert_batch({k: v for k, v in batch.items() if k != "worker"}, _expected(train, want))
    data = torch_data.loader(
        train, PretrainingSampler(len(train), 0, 2, 0, 1), num_workers=1,
        worker_init_fn=functools.partial(_touch, str(tmp_path)), **_context(1),
    )
    assert isinstance(data, torch_data.UnpackingLoader)
    seen = list(data)
    assert os.path.exists(tmp_path / "worker0")  # the user's worker_init_fn ran too
    assert len(seen) == len(indices)
    _assert_batch(seen[-1], _expected(train, indices[-1]))


# -- the natural spelling: DataLoader + torch's default collate --------------------------------


def _same_batches(got: list, want: list) -> None:
    assert len(got) == len(want) > 0
    for batch, expected in zip(got, want):
        assert isinstance(batch, dict) and list(batch) == list(expected)
        for key, tensor in expected.items():
            assert batch[key].dtype == tensor.dtype == DTYPES[key], key
            assert torch.equal(batch[key], tensor), key


def _samplers(total: int) -> dict:
    return {
        "pretraining": lambda: PretrainingSampler(total, 4, 3, 1, 2),
        "random": lambda: RandomSampler(total, 0, 3, 0, 2, seed=11),
    }


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("kind", ["pretraining", "random"])
def test_dataloader_with_default_collate_gives_the_loaders_batches(blended, kind, num_workers):
    from torch.utils.data import DataLoader

    make = _samplers(len(blended))[kind]
    want = list(torch_data.loader(blended, make()))
    data = DataLoader(torch_data.TorchDataset(blended), batch_sampler=make(),
                      num_workers=num_workers, **_context(num_workers))
    _same_batches(list(data), want)
    # a sampler that yields whole micro-batches, spelled sampler= with batch_size=None
    data = DataLoader(torch_data.TorchDataset(blended), sampler=make(), batch_size=None,
                      num_workers=num_workers, **_context(num_workers))
    _same_batches(list(data), want)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_with_batch_size(train, num_workers):
    from torch.utils.data import DataLoader

    data = DataLoader(torch_data.TorchDataset(train), batch_size=4, num_workers=num_workers,
                      **_context(num_workers))
    batches = list(data)
    assert len(batches) == -(-len(train) // 4)
    for step, batch in enumerate(batches):
        indices = range(4 * step, min(4 * step + 4, len(train)))
        _assert_batch(batch, _expected(train, indices))
    def shuffled():
        generator = torch.Generator().manual_seed(0)
        return torch.utils.data.RandomSampler(range(len(train)), generator=generator)

    order = list(shuffled())
    data = DataLoader(torch_data.TorchDataset(train), sampler=shuffled(), batch_size=5,
                      drop_last=True, num_workers=num_workers, **_context(num_workers))
    batches = list(data)
    assert len(batches) == len(train) // 5
    for step, batch in enumerate(batches):
        _assert_batch(batch, _expected(train, order[5 * step:5 * step + 5]))


def test_samples_collate_like_a_list_of_samples(train):
    from torch.utils.data import default_collate

    dataset = torch_data.TorchDataset(train)
    samples = dataset.__getitems__([4, 0, 9])
    assert len(samples) == 3
    for row, index in zip(samples, (4, 0, 9)):  # each one sample, as ds[i] gives it
        _assert_batch(row, train[index])
    _assert_batch(default_collate(samples), _expected(train, [4, 0, 9]))
    _assert_batch(default_collate([samples[2], samples[0]]), _expected(train, [9, 4]))
    _assert_batch(torch_data.batch_collate(samples), _expected(train, [4, 0, 9]))


def test_micro_batch_sampler_given_as_a_sampler_says_how_to_pass_it(train):
    from torch.utils.data import DataLoader

    sampler = PretrainingSampler(len(train), 0, 2, 0, 1)
    data = DataLoader(torch_data.TorchDataset(train), sampler=sampler)
    with pytest.raises(mdc.DataError, match="batch_sampler="):
        next(iter(data))


# -- resume onto the same data only ---------------------------------------------------------


def test_stateful_loader_state_refuses_other_data(tmp_path):
    from adapter_helpers import gpt_dataset

    from megadata_core.datasets.scheduled_blend import fingerprint

    prefix = write_corpus(str(tmp_path / "corpus"), seed=3)
    mine = gpt_dataset(prefix, str(tmp_path / "cache"), random_seed=1, sequence_length=SEQ)
    other = gpt_dataset(prefix, str(tmp_path / "cache"), random_seed=2, sequence_length=SEQ)
    assert len(mine) == len(other)  # same length: the sampler alone cannot tell them apart

    def sampler():
        return PretrainingSampler(len(mine), 0, 2, 0, 1)

    full = [batch["tokens"] for batch in torch_data.loader(mine, sampler())]
    loader = torch_data.StatefulLoader(mine, sampler())
    for step, _ in enumerate(loader):
        if step == 2:
            state = loader.state_dict()
            break
    assert state["fingerprint"] == fingerprint(mine) != fingerprint(other)

    onto_other = torch_data.StatefulLoader(other, sampler())
    with pytest.raises(mdc.DataError, match=r"fingerprint: .*state was made for"):
        onto_other.load_state_dict(state)
    old = {key: value for key, value in state.items() if key != "fingerprint"}
    with pytest.raises(mdc.DataError, match="fingerprint: the state has none"):
        torch_data.StatefulLoader(mine, sampler()).load_state_dict(old)

    resumed = torch_data.StatefulLoader(mine, sampler())  # the same data: exact resume
    resumed.load_state_dict(state)
    rest = [batch["tokens"] for batch in resumed]
    assert len(rest) == len(full) - 3
    assert all(torch.equal(got, want) for got, want in zip(rest, full[3:]))
