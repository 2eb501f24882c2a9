"""megadata_adapters.frameworks.grain_source: Grain data source (MapDataset, DataLoader with
workers,
checkpoints), the batched micro-batch dataset (resume across worker counts and DP
layouts), and the absl-flags workaround (grain issue 1355)."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from adapter_helpers import deadline, gpt_dataset, write_corpus

import megadata_core as mdc
from megadata_core.handover import pack

grain = pytest.importorskip("grain")
grain_source = pytest.importorskip("megadata_adapters.frameworks.grain_source")

SEQ = 16


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    root = tmp_path_factory.mktemp("grain_source")
    prefix = write_corpus(str(root / "corpus"), seed=0)
    return gpt_dataset(prefix, str(root / "cache"), random_seed=1, sequence_length=SEQ)


@pytest.fixture(scope="module")
def other(tmp_path_factory):
    root = tmp_path_factory.mktemp("grain_source_other")
    prefix = write_corpus(str(root / "corpus"), seed=0)
    return gpt_dataset(prefix, str(root / "cache"), random_seed=2, sequence_length=SEQ)


def _equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def _stack(dataset, indices) -> dict:
    samples = [dataset[int(i)] for i in indices]
    return {key: np.stack([s[key] for s in samples]) for key in samples[0]}


# --- GrainSource ---------------------------------------------------------------------------


def test_source_reads_like_the_dataset(train):
    src = grain_source.GrainSource(train)
    assert len(src) == len(train) > 20
    for i in (0, 5, len(train) - 1):
        _equal(src[i], train[i])
    sample = src[3]
    for value in sample.values():
        assert value.flags.writeable and value.flags.owndata
        value[...] = 0  # writing must not touch the dataset
    _equal(src[3], train[3])
    _equal(src.__getitems__([4, 1, 9]), _stack(train, [4, 1, 9]))
    batched = src._getitems([2, 7])
    assert len(batched) == 2
    _equal(batched[1], train[7])
    with pytest.raises(IndexError):
        src[len(train)]


def test_source_repr_is_stable_and_identifies_data(train, other):
    a, b = grain_source.GrainSource(train), grain_source.GrainSource(train)
    assert repr(a) == repr(b)
    assert repr(train) in repr(a) and "fingerprint=" in repr(a)
    assert repr(pickle.loads(pickle.dumps(a))) == repr(a)
    # same corpus, other seed: different arrays, so a different repr
    assert repr(grain_source.GrainSource(other)) != repr(a)


def test_source_pickles_small(train):
    src = grain_source.GrainSource(train)
    data = pickle.dumps(src)
    assert len(data) < 8192, len(data)
    clone = pickle.loads(data)
    _equal(clone[11], train[11])


def test_map_dataset_shuffle_batch(train):
    src = grain_source.GrainSource(train)
    ds = grain.MapDataset.source(src).shuffle(seed=3).batch(4, drop_remainder=True)
    first = ds[0]
    assert first["tokens"].shape == (4, SEQ)
    order = grain.MapDataset.range(len(train)).shuffle(seed=3)
    _equal(first, _stack(train, [order[i] for i in range(4)]))
    # the IterDataset path and its checkpoint
    it = iter(ds.to_iter_dataset())
    for _ in range(2):
        next(it)
    state = it.get_state()
    expected = [next(it) for _ in range(3)]
    it2 = iter(ds.to_iter_dataset())
    it2.set_state(state)
    for want in expected:
        _equal(next(it2), want)


def _loader(src, worker_count, shard_options=None):
    sampler = grain.samplers.IndexSampler(
        num_records=len(src),
        shard_options=shard_options or grain.sharding.NoSharding(),
        shuffle=True,
        num_epochs=1,
        seed=5,
    )
    return grain.DataLoader(
        data_source=src,
        sampler=sampler,
        worker_count=worker_count,
        operations=[grain.transforms.Batch(batch_size=4, drop_remainder=True)],
    )


@deadline(60)
def test_data_loader_with_workers_checkpoint_resumes(train):
    """worker_count=2 from plain pytest (no absl app): grain issue 1355 must not bite."""
    src = grain_source.GrainSource(train)
    loader = _loader(src, worker_count=2)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = it.get_state()
    expected = [next(it) for _ in range(3)]
    it2 = iter(_loader(grain_source.GrainSource(train), worker_count=2))
    it2.set_state(state)  # Grain checks the data source repr here
    for want in expected:
        _equal(next(it2), want)
    # a checkpoint taken over other data is refused
    with pytest.raises(ValueError):
        iter(_loader(grain_source.GrainSource(_Other(train)), worker_count=0)).set_state(state)


class _Other:
    """Same samples, other identity (repr)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        return self.dataset[i]

    def __repr__(self):
        return "Other()"


def test_data_loader_shard_by_jax_process(train):
    src = grain_source.GrainSource(train)
    shard = grain.sharding.ShardByJaxProcess(drop_remainder=True)
    batches = list(_loader(src, worker_count=0, shard_options=shard))
    assert len(batches) == len(train) // 4  # one JAX process: the whole dataset


# --- batched_dataset -----------------------------------------------------------------------


def _sampler_batches(train, consumed, mbs, rank, size, count):
    sampler = mdc.samplers.PretrainingSampler(len(train), consumed, mbs, rank, size)
    out = []
    for indices in sampler:
        out.append(_stack(train, indices))
        if len(out) == count:
            break
    return out


def test_micro_batches_follow_pretraining_sampler(train):
    for rank in range(2):
        ds = grain_source.MicroBatchDataset(
            train,
            micro_batch_size=3,
            data_parallel_rank=rank,
            data_parallel_size=2,
            consumed_samples=6,
        )
        assert len(ds) == (len(train) - 6) // 6
        want = _sampler_batches(train, 6, 3, rank, 2, 4)
        for got, expected in zip(
            iter(
                grain_source.batched_dataset(
                    train,
                    micro_batch_size=3,
                    data_parallel_rank=rank,
                    data_parallel_size=2,
                    consumed_samples=6,
                )
            ),
            want,
        ):
            _equal(got, expected)
        _equal(ds[1], want[1])
    with pytest.raises(mdc.DataError, match="data_parallel_rank"):
        grain_source.batched_dataset(
            train, micro_batch_size=2, data_parallel_rank=2, data_parallel_size=2
        )
    with pytest.raises(mdc.DataError, match="consumed_samples"):
        grain_source.batched_dataset(train, micro_batch_size=2, consumed_samples=10**6)


def test_batched_reads_once_per_batch(train):
    calls = []

    class Counting(_Other):
        def __getitems__(self, indices):
            calls.append(list(indices))
            return self.dataset.__getitems__(indices)

    batches = list(grain_source.batched_dataset(Counting(train), micro_batch_size=4))
    assert len(batches) == len(train) // 4 == len(calls)
    assert all(len(c) == 4 for c in calls)
    assert not batches[0]["tokens"].flags.writeable  # zero-copy: the core's own arrays
    with pytest.raises(ValueError, match="read-only"):
        batches[0]["tokens"][0, 0] = 1
    copies = list(grain_source.batched_dataset(train, micro_batch_size=4, writable=True))
    for got, want in zip(copies, batches):
        _equal(got, want)
        _owned(got)


@deadline(60)
def test_batched_state_resumes_with_other_workers_and_layout(train):
    k = 3
    it = iter(
        grain_source.batched_dataset(
            train, micro_batch_size=4, data_parallel_rank=0, data_parallel_size=2, worker_count=0
        )
    )
    for _ in range(k):
        next(it)
    state = it.get_state()
    assert state == {
        "consumed_samples": k * 8,
        "total_samples": len(train),
        "fingerprint": grain_source.fingerprint(train),
    }
    # a new pipeline with 2 worker processes, same layout
    resumed = grain_source.batched_dataset(
        train, micro_batch_size=4, data_parallel_rank=0, data_parallel_size=2, worker_count=2
    )
    it2 = iter(resumed)
    it2.set_state(state)
    try:
        want = [next(it) for _ in range(3)]
        for expected in want:
            _equal(next(it2), expected)
        assert it2.get_state()["consumed_samples"] == (k + 3) * 8
    finally:
        it2.close()
    # another DP layout with the same global batch (dp=4, mbs=2): ranks' concatenation equals
    # the global batches of the original layout
    expected = _sampler_batches(train, 0, 8, 0, 1, k + 2)[k:]
    parts = []
    for rank in range(4):
        it3 = iter(
            grain_source.batched_dataset(
                train, micro_batch_size=2, data_parallel_rank=rank, data_parallel_size=4
            )
        )
        it3.set_state(state)
        parts.append([next(it3) for _ in range(2)])
    for step, want in enumerate(expected):
        got = {key: np.concatenate([parts[r][step][key] for r in range(4)]) for key in want}
        _equal(got, want)
    with pytest.raises(mdc.DataError, match="total_samples"):
        iter(grain_source.batched_dataset(train, micro_batch_size=2)).set_state(
            {
                "consumed_samples": 0,
                "total_samples": 1,
                "fingerprint": grain_source.fingerprint(train),
            }
        )
    with pytest.raises(mdc.DataError, match="fingerprint"):
        iter(grain_source.batched_dataset(train, micro_batch_size=2)).set_state(
            {"consumed_samples": 0, "total_samples": len(train)}
        )


def _core_layout(batch: dict) -> None:
    """As the core's __getitems__ hands a batch out: read-only, tokens and labels views
    of one text buffer, constants shared read-only arrays."""
    for key, value in batch.items():
        assert not value.flags.writeable, key
    assert pack.text_of(batch["tokens"], batch["labels"]) is not None
    assert pack.is_constant(batch["position_ids"])


def _owned(batch: dict) -> None:
    for key, value in batch.items():
        assert value.flags.writeable and value.flags.c_contiguous, key
        for other, second in batch.items():
            if key < other:
                assert not np.shares_memory(value, second), (key, other)


@pytest.mark.parametrize("extra", [True, False])
def test_packed_micro_batches_unpack_to_the_core_batch(tmp_path, extra):
    prefix = write_corpus(str(tmp_path / "corpus"), seed=4)
    config = mdc.GPTDataConfig(
        random_seed=1, sequence_length=SEQ, eod_id=3, add_extra_token_to_sequence=extra
    )
    indexed = mdc.IndexedDataset(prefix)
    core = mdc.GPTDataset(indexed, np.arange(len(indexed.document_indices) - 1), None, config)
    plain = grain_source.MicroBatchDataset(core, micro_batch_size=4)
    packed = grain_source.MicroBatchDataset(core, micro_batch_size=4, packed=True)
    for step in (0, 2, 1):
        element = packed[step]
        assert isinstance(element, grain_source.PackedMicroBatch)
        assert (element.text is not None) == extra
        if extra:  # the text travels once; the constant loss mask and position ids not at all
            assert set(element.constants) == {"loss_mask", "position_ids"}
            assert len(pickle.dumps(element)) < element.text.nbytes + 2_000
        want = {key: np.array(value) for key, value in plain[step].items()}
        got = grain_source.unpack(pickle.loads(pickle.dumps(element)))
        assert list(got) == list(want)
        for key in want:
            assert got[key].dtype == want[key].dtype, key
        _equal(got, want)
        _owned(got)


@deadline(90)
def test_batched_workers_ship_packed_and_resume(train):
    want = list(grain_source.batched_dataset(train, micro_batch_size=3))
    ds = grain_source.batched_dataset(train, micro_batch_size=3, worker_count=2)
    it = iter(ds)
    try:
        got = [next(it) for _ in range(4)]
        state = it.get_state()
    finally:
        it.close()
    for batch, expected in zip(got, want):
        _equal(batch, expected)
        _core_layout(batch)
        assert batch["tokens"].dtype == train.__getitems__([0])["tokens"].dtype
    assert state["consumed_samples"] == 4 * 3
    it2 = iter(grain_source.batched_dataset(train, micro_batch_size=3, worker_count=2))
    try:
        it2.set_state(state)
        for expected in want[4:7]:
            _equal(next(it2), expected)
    finally:
        it2.close()


@deadline(90)
def test_batched_workers_writable_gives_arrays_of_their_own(train):
    want = list(grain_source.batched_dataset(train, micro_batch_size=3))[:2]
    pipeline = grain_source.batched_dataset(
        train, micro_batch_size=3, worker_count=2, writable=True
    )
    it = iter(pipeline)
    try:
        got = [next(it) for _ in range(2)]
    finally:
        it.close()
    for batch, expected in zip(got, want):
        _equal(batch, expected)
        _owned(batch)


def test_ensure_absl_flags_parsed_is_idempotent():
    from absl import flags

    grain_source.ensure_absl_flags_parsed()
    grain_source.ensure_absl_flags_parsed()
    assert flags.FLAGS.is_parsed()


def test_workers_start_outside_an_absl_app(train, tmp_path):
    """grain issue 1355: a plain script (jax imported, no absl app) with worker_count=2."""
    script = tmp_path / "plain.py"
    script.write_text(
        textwrap.dedent(f"""
        import pickle, sys
        import grain, jax  # noqa: F401  (jax installed is the trigger)
        from megadata_adapters.frameworks import grain_source

        if __name__ == "__main__":
            with open({str(tmp_path / "train.pkl")!r}, "rb") as f:
                train = pickle.load(f)
            src = grain_source.GrainSource(train)
            sampler = grain.samplers.IndexSampler(len(src), grain.sharding.NoSharding(),
                                                  shuffle=False, num_epochs=1, seed=0)
            loader = grain.DataLoader(data_source=src, sampler=sampler, worker_count=2,
                                      operations=[grain.transforms.Batch(4)])
            print(sum(1 for _ in loader))
    """)
    )
    (tmp_path / "train.pkl").write_bytes(pickle.dumps(train))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == str(-(-len(train) // 4))


# --- Grain's CheckpointHandler (what Orbax calls to save and restore the data iterator) ---


@deadline(120)
def test_grain_checkpoint_handler_saves_and_restores_both_iterators(train, tmp_path):
    from etils import epath
    from grain.checkpoint import CheckpointHandler

    handler = CheckpointHandler()
    # our batched pipeline (a Grain DatasetIterator: its state is saved as JSON)
    it = iter(grain_source.batched_dataset(train, micro_batch_size=4, worker_count=0))
    for _ in range(2):
        next(it)
    batched_dir = epath.Path(tmp_path / "batched")
    batched_dir.mkdir()
    handler.save(batched_dir, it)
    want = [next(it) for _ in range(3)]
    fresh = iter(grain_source.batched_dataset(train, micro_batch_size=4, worker_count=2))
    try:
        restored = handler.restore(batched_dir, fresh)
        for expected in want:
            _equal(next(restored), expected)
    finally:
        fresh.close()
    # grain.DataLoader over GrainSource (its state is bytes with the source's repr)
    loader_it = iter(_loader(grain_source.GrainSource(train), worker_count=0))
    next(loader_it)
    loader_dir = epath.Path(tmp_path / "loader")
    loader_dir.mkdir()
    handler.save(loader_dir, loader_it)
    want = [next(loader_it) for _ in range(2)]
    restored = handler.restore(loader_dir, iter(_loader(grain_source.GrainSource(train), 0)))
    for expected in want:
        _equal(next(restored), expected)
