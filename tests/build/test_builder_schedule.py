"""build_datasets with a blend_schedule: real corpora, epochs that never reorder, edits
that keep the past, packing and document masking, the cache, resume states."""

from __future__ import annotations

import os
import pickle
import warnings

import numpy as np
import pytest
from gpt_oracle import write_corpus
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import megadata_core as mdc
from megadata_core.datasets.scheduled_blend import continues_schedule, fingerprint, resume_fields
from megadata_core.indices.schedule import epoch_seed

SEQ = 16


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """Four corpora of different sizes (web large, math tiny: read for many epochs)."""
    root = tmp_path_factory.mktemp("schedule")
    rng = np.random.default_rng(7)
    sizes = {"web": 400, "code": 150, "books": 80, "math": 20}
    return {
        name: write_corpus(str(root / name), rng.integers(3, 40, count), rng, vocab=1000)
        for name, count in sizes.items()
    }


def build(stages, size=3000, *, cache=None, valid=40, **kw):
    fields = {"random_seed": 5, "sequence_length": SEQ, "split": "95,5,0", **kw}
    config = mdc.GPTDataConfig(blend_schedule=stages, path_to_cache=cache, **fields)
    return mdc.build_datasets(config, [size, valid, None])


def read(dataset, lo=0, hi=None):
    return dataset.__getitems__(np.arange(lo, len(dataset) if hi is None else hi))


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def member_samples(dataset) -> list[tuple[int, int]]:
    """(dataset id, member sample) of every sample of a scheduled blend, in order."""
    return list(zip(np.asarray(dataset.dataset_index).tolist(),
                    np.asarray(dataset.dataset_sample_index).tolist()))


def test_megatron_users_case_switch_at_half(corpora):
    """Train on blend A to 50%, switch weights: the first half is unchanged bit for bit
    and nothing of it is served again."""
    web, code, books = corpora["web"], corpora["code"], corpora["books"]
    a = [(0, ([web, code, books], [0.6, 0.3, 0.1]))]
    b = a + [(1500, ([web, code, books], [0.2, 0.3, 0.5]))]
    train_a, valid_a, _ = build(a)
    train_b, _, _ = build(b)
    assert same(read(train_a, 0, 1500), read(train_b, 0, 1500))
    pairs = member_samples(train_b)
    assert len(set(pairs)) == len(pairs)  # no member sample twice in the whole run
    assert not set(member_samples(train_a)[:1500]) & set(pairs[1500:])
    # the second half follows the new weights: every prefix within one sample of them
    counts = np.bincount(np.asarray(train_b.dataset_index[1500:]), minlength=3)
    assert counts.tolist() == [300, 450, 750]
    # the valid split follows the same stages in its own samples
    assert isinstance(valid_a, mdc.ScheduledBlendedDataset) and len(valid_a) == 40


def test_a_prefix_joins_and_one_leaves(corpora):
    web, code, math = corpora["web"], corpora["code"], corpora["math"]
    stages = [(0, f"1 {web} 1 {code}"), (1000, f"1 {web} 0 {code} 2 {math}")]
    train, _, _ = build(stages)
    index = np.asarray(train.dataset_index)
    assert set(index[:1000].tolist()) == {0, 1} and set(index[1000:].tolist()) == {0, 2}
    # math (20 documents) is read for many epochs: its chain grew, each a one-epoch pass
    chain = train.datasets[2]
    assert isinstance(chain, mdc.EpochChain) and len(chain.passes) > 10
    assert len(chain) >= int((index == 2).sum())


def test_epochs_are_one_epoch_datasets_with_their_own_seed(corpora):
    math = corpora["math"]
    train, _, _ = build([(0, ([math], [1.0]))], size=300)
    chain = train.datasets[0]
    first = chain.passes[0]
    for e, epoch in enumerate(chain.passes):
        assert epoch.config.random_seed == epoch_seed(5, e)
        alone = mdc.GPTDataset(first.indexed, first.indices, None,
                               first.config.__class__(**{**_fields(first.config),
                                                         "random_seed": epoch_seed(5, e)}),
                               "train")
        assert same(read(epoch), read(alone))
        # one epoch: every document's tokens once (each sample a window of the epoch)
        assert len(epoch) == len(first)


def _fields(config) -> dict:
    from dataclasses import fields

    return {f.name: getattr(config, f.name) for f in fields(config)}


def test_reading_further_adds_epochs_and_never_reorders(corpora):
    code, math = corpora["code"], corpora["math"]
    stages = [(0, ([code, math], [0.5, 0.5]))]
    short, _, _ = build(stages, size=400)
    long, _, _ = build(stages, size=2000)
    assert len(long.datasets[1].passes) > len(short.datasets[1].passes)
    assert same(read(short), read(long, 0, 400))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                    HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 2500), weights=st.lists(st.floats(0.0, 4.0), min_size=4, max_size=4),
       size=st.integers(0, 800))
@example(cut=0, weights=[0.0, 0.0, 0.0, 1.0], size=0)
@example(cut=2500, weights=[1.0, 1.0, 1.0, 1.0], size=0)
def test_any_edit_keeps_the_samples_before_it(corpora, cut, weights, size):
    names = ["web", "code", "books", "math"]
    if not any(weights):
        weights[0] = 1.0
    old = [(0, f"3 {corpora['web']} 1 {corpora['code']}"),
           (700, f"1 {corpora['web']} 1 {corpora['books']}")]
    kept = [stage for stage in old if stage[0] < cut]
    new = kept + [(cut, ([corpora[n] for n in names], weights))]
    if cut == 0:
        new = new[-1:]
    before, _, _ = build(old, size=2500)
    after, _, _ = build(new, size=cut + size)
    assert same(read(before, 0, cut), read(after, 0, cut))
    assert after.continues(before.resume_record(), cut) is None
    pairs = member_samples(after)
    assert len(set(pairs)) == len(pairs)


def test_edit_resume_states(corpora):
    web, code, books = corpora["web"], corpora["code"], corpora["books"]
    old, _, _ = build([(0, f"1 {web} 1 {code}")])
    new, _, _ = build([(0, f"1 {web} 1 {code}"), (1200, f"1 {web} 1 {books}")])
    state = {"consumed_samples": 1200, **resume_fields(old)}
    assert fingerprint(old) != fingerprint(new)
    assert continues_schedule(state, new, 1200, sequential=True)
    with pytest.raises(mdc.DataError, match="differ before the 1300 samples already read"):
        continues_schedule(state, new, 1300, sequential=True)
    with pytest.raises(mdc.DataError, match="this reader shuffles the blend"):
        continues_schedule(state, new, 1200, sequential=False)
    changed, _, _ = build([(0, f"1 {web} 2 {code}"), (1200, f"1 {web} 1 {books}")])
    with pytest.raises(mdc.DataError, match="stage 0 .* has other weights or datasets"):
        continues_schedule(state, changed, 10, sequential=True)
    # other data under the same schedule: the members' identities differ
    other, _, _ = build([(0, f"1 {web} 1 {code}")], random_seed=6)
    with pytest.raises(mdc.DataError, match="stage 0"):
        continues_schedule(state, other, 10, sequential=True)
    assert not continues_schedule({"fingerprint": "x"}, new, 10, sequential=True)
    with pytest.raises(mdc.DataError, match="is not a schedule record"):
        continues_schedule({"blend_schedule": [1]}, new, 10, sequential=True)


@pytest.mark.parametrize("packing, masking", [("best_fit", False), ("concat", True),
                                              ("best_fit", True)])
def test_packing_and_document_masking(corpora, packing, masking):
    web, books = corpora["web"], corpora["books"]
    train, _, _ = build([(0, f"1 {web} 1 {books}"), (500, f"1 {web} 3 {books}")], size=1200,
                        packing=packing, document_masking=masking)
    batch = read(train, 0, 1200)
    if masking:
        assert "segment_ids" in batch and "cu_seqlens" in batch
    ids, samples = np.asarray(train.dataset_index), np.asarray(train.dataset_sample_index)
    for position in (0, 499, 500, 1199):
        member = train.datasets[int(ids[position])][int(samples[position])]
        for key, value in member.items():
            assert np.array_equal(batch[key][position], value), key


def test_cache_cold_warm_and_damage(corpora, tmp_path):
    web, math = corpora["web"], corpora["math"]
    stages = [(0, f"1 {web}"), (800, f"1 {web} 1 {math}")]
    cold, _, _ = build(stages, cache=str(tmp_path))
    warm, _, _ = build(stages, cache=str(tmp_path))
    expected = {key: value.copy() for key, value in read(cold).items()}
    assert same(expected, read(warm))
    assert getattr(warm.index_arrays["dataset_index"], "filename", None)
    entry = [name for name in os.listdir(tmp_path)
             if name.endswith("train-dataset_sample_index.npy")]
    assert len(entry) == 1
    path = tmp_path / entry[0]
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again, _, _ = build(stages, cache=str(tmp_path))
    assert any("CRC" in str(w.message) or "damaged" in str(w.message) for w in caught)
    assert same(expected, read(again))


def test_pickles_for_workers(corpora):
    train, _, _ = build([(0, f"1 {corpora['web']} 1 {corpora['math']}")], size=500)
    copy = pickle.loads(pickle.dumps(train))
    assert same(read(train), read(copy))
    assert copy.resume_record() == train.resume_record()


def test_megatron_order_under_a_schedule(corpora):
    web, code = corpora["web"], corpora["code"]
    train, _, _ = build([(0, f"0.7 {web} 0.3 {code}"), (900, f"0.2 {web} 0.8 {code}")],
                        blend_order="megatron")
    static = mdc.BlendedDataset(train.datasets, [0.7, 0.3], 900, train.config, use_cache=False)
    assert np.array_equal(static.dataset_index, train.dataset_index[:900])


def test_sizes_and_errors(corpora):
    web = corpora["web"]
    with pytest.raises(mdc.DataError, match=r"sizes\[valid\]: None, but blend_schedule"):
        build([(0, f"1 {web}")], valid=None)
    with pytest.raises(mdc.DataError, match=r"blend_schedule: dataset prefix '.*nothing'"):
        build([(0, f"1 {web}"), (10, f"1 {web}9nothing")])
    # a split without documents asked for samples names the prefix and the split
    with pytest.raises(mdc.DataError, match=r"'.*math' \(valid split"):
        mdc.build_datasets(
            mdc.GPTDataConfig(random_seed=1, sequence_length=SEQ, split="99.9,0.1,0",
                              blend_schedule=[(0, f"1 {corpora['math']}")]), [10, 10, None])
    # size 0 and a stage past the end
    train, _, _ = build([(0, f"1 {web}"), (10**9, f"1 {corpora['math']}")], size=0)
    assert len(train) == 0 and train.weights == [1.0, 0.0]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                    HealthCheck.function_scoped_fixture])
@given(step=st.integers(0, 40), micro=st.sampled_from([1, 2, 4]), ranks=st.integers(1, 4),
       edit=st.booleans())
@example(step=0, micro=1, ranks=1, edit=False)
def test_resume_at_any_step_with_other_dp_sizes(corpora, step, micro, ranks, edit):
    """The global sequence a PretrainingSampler resumed at any step hands out (any DP size
    and micro-batch size, the schedule edited there or not) is the uninterrupted run's."""
    from megadata_core.samplers import PretrainingSampler

    web, code, books = corpora["web"], corpora["code"], corpora["books"]
    stages = [(0, f"2 {web} 1 {code}"), (100, f"1 {web} 1 {books}")]
    first, _, _ = build(stages, size=400)
    consumed = step * 8  # 8 samples a step before the restart
    later = stages
    if edit and consumed > 0:
        later = [stage for stage in stages if stage[0] < consumed] + [
            (consumed, f"1 {code} 3 {books}")
        ]
    second, _, _ = build(later, size=400)
    state = {"consumed_samples": consumed, **resume_fields(first)}
    assert fingerprint(first) == fingerprint(second) or continues_schedule(
        state, second, consumed, sequential=True
    )
    samplers = [PretrainingSampler(len(second), consumed, micro, rank, ranks)
                for rank in range(ranks)]
    streams = [iter(sampler) for sampler in samplers]
    handed = []
    for _ in range(5):
        for stream in streams:
            handed.extend(next(stream, []))
    width = micro * ranks
    expected = list(range(consumed, consumed + 5 * width))
    expected = [i for i in expected if i < len(second) - (len(second) - consumed) % width]
    assert handed == expected
    reference = read(first if not edit else second, 0, consumed)
    assert same(read(first, 0, consumed), reference)


def test_reads_through_the_pass_table_equal_reads_through_the_chains(corpora):
    """Batches read one level down (every pass of every chain in one table) equal the
    chains' own reads, across pass boundaries and members."""
    web, math, books = corpora["web"], corpora["math"], corpora["books"]
    train, _, _ = build([(0, f"1 {web} 2 {math}"), (700, f"1 {books} 1 {math}")], size=2000)
    assert any(len(chain.passes) > 3 for chain in train.datasets)
    rng = np.random.default_rng(3)
    for indices in [np.arange(2000), *rng.integers(0, 2000, (20, 17))]:
        flat = train.__getitems__(indices)
        nested = mdc.BlendedDataset.__getitems__(train, indices)
        assert same(flat, nested)
