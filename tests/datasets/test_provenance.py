"""Provenance against an independent walk of the index arrays (tests/helpers/
provenance_walk.py): a batch's segments (every document id and token range, and the
corpus tokens they name equal to the samples' text), where a document went, the per-token
``source_ids``, for Megatron and Feistel shuffles, concat and best_fit packing, single
datasets, blends and blend schedules; training steps against the sequential sampler."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from provenance_walk import member_corpus, samples_holding, token_sources, walk

import megadata_core as mdc
from megadata_core.batch_ramp import BatchSizeSchedule
from megadata_core.datasets import provenance
from megadata_core.datasets.context_parallel import context_parallel_slice
from megadata_core.datasets.scheduled_blend import fingerprint

SEQ = 32
MODES = [(s, p) for s in ("megatron", "feistel") for p in ("concat", "best_fit")]


def _corpus(path: str, seed: int, documents: int = 120) -> str:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 3 * SEQ, documents)  # empty ones, and longer than a sample
    lengths[::17] = 0
    lengths[5::13] = 1  # one-token documents and cut remainders of one token
    lengths[7::29] = 2 * (SEQ + 1) + 1
    with mdc.IndexedDatasetWriter(path, np.uint16) as writer:
        for n in lengths.tolist():
            tokens = rng.integers(1, 60000, n)
            writer.add_document(tokens, [n])
    return path


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("provenance")
    return [_corpus(str(root / f"c{i}"), seed=i) for i in range(3)], str(root / "cache")


def _config(corpora, shuffle, packing, kind, **options):
    prefixes, cache = corpora
    common = dict(random_seed=7, sequence_length=SEQ, shuffle=shuffle, packing=packing,
                  path_to_cache=cache, split="80,20,0", eod_id=0, **options)
    if kind == "single":
        return mdc.GPTDataConfig(blend=([prefixes[0]], None), **common)
    if kind == "blend":
        return mdc.GPTDataConfig(blend=(prefixes, [0.5, 0.3, 0.2]), **common)
    schedule = [(0, (prefixes[:2], [0.7, 0.3])), (150, (prefixes, [0.2, 0.3, 0.5]))]
    return mdc.GPTDataConfig(blend_schedule=schedule, **common)


def _train(corpora, shuffle, packing, kind, **options):
    config = _config(corpora, shuffle, packing, kind, **options)
    return mdc.build_datasets(config, [400, 40, None])[0]


def _text(dataset, positions):
    """int64 [B, S + 1]: every sample's text (tokens and the last label)."""
    batch = dataset.__getitems__(positions)
    return np.concatenate([batch["tokens"], batch["labels"][:, -1:]], axis=1).astype(np.int64)


KINDS = ["single", "blend", "schedule"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shuffle,packing", MODES)
def test_batch_segments_are_the_walk_and_name_the_samples_tokens(corpora, shuffle, packing,
                                                                 kind):
    dataset = _train(corpora, shuffle, packing, kind)
    positions = np.arange(len(dataset))
    segments = provenance.batch_segments(dataset, positions)
    text = _text(dataset, positions)
    assert segments.width == SEQ + 1
    for row, position in enumerate(positions.tolist()):
        j, k, expected = walk(dataset, position)
        part = segments.of(row)
        got = list(zip(segments.document[part].tolist(), segments.start[part].tolist(),
                       segments.length[part].tolist()))
        assert got == expected, position
        assert set(segments.dataset_id[part].tolist()) <= {j}
        assert (segments.sample_dataset[row], segments.member_sample[row]) == (j, k)
        columns = np.cumsum([0] + [n for _, _, n in expected])[:-1]
        assert segments.column[part].tolist() == columns.tolist()
        indexed = member_corpus(dataset, j)
        pieces = [np.asarray(indexed.get(d, offset=s, length=n)) for d, s, n in expected]
        real = np.concatenate(pieces).astype(np.int64) if pieces else np.zeros(0, np.int64)
        assert np.array_equal(text[row, : len(real)], real), position
        assert not text[row, len(real):].any()  # padding (best_fit) only after the text


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shuffle,packing", MODES)
def test_where_finds_every_sample_that_holds_the_document(corpora, shuffle, packing, kind):
    dataset = _train(corpora, shuffle, packing, kind)
    holding = samples_holding(dataset)
    members = len(getattr(dataset, "datasets", [dataset]))
    for j in range(members):
        corpus = member_corpus(dataset, j)
        for document in range(0, len(corpus), 3):  # train and valid documents, empty ones
            got = provenance.where_document(dataset, j, document, block=64)
            expected = holding.get((j, document), [])
            assert got.tolist() == expected, (j, document)
    assert any(len(v) > 1 for v in holding.values())  # documents read in several epochs


def test_where_scans_in_blocks_with_the_same_answer(corpora):
    dataset = _train(corpora, "megatron", "concat", "blend")
    for document in (0, 5, 33):
        whole = provenance.where_document(dataset, 1, document)
        assert np.array_equal(provenance.where_document(dataset, 1, document, block=7),
                              whole)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shuffle,packing", MODES)
@pytest.mark.parametrize("masking", [False, True])
def test_source_ids_equal_the_walk_for_every_token(corpora, shuffle, packing, kind, masking):
    dataset = _train(corpora, shuffle, packing, kind, source_ids=True,
                     document_masking=masking)
    positions = np.arange(len(dataset))
    batch = dataset.__getitems__(positions)
    assert batch["dataset_ids"].dtype == np.int32 and batch["document_ids"].dtype == np.int32
    assert batch["document_ids"].shape == (len(positions), SEQ)
    for row, position in enumerate(positions.tolist()):
        members, documents = token_sources(dataset, position, SEQ + 1)
        assert np.array_equal(batch["document_ids"][row], documents[:SEQ]), position
        assert np.array_equal(batch["dataset_ids"][row], members[:SEQ]), position
    one = dataset[int(positions[-1])]
    members, documents = token_sources(dataset, int(positions[-1]), SEQ + 1)
    assert np.array_equal(one["dataset_ids"], members[:SEQ])
    assert np.array_equal(one["document_ids"], documents[:SEQ])
    if masking:  # padding is where segment_ids is 0
        assert np.array_equal(batch["document_ids"] < 0, batch["segment_ids"] == 0)


def test_source_ids_of_members_that_hand_over_no_pieces(corpora):
    """A blend of epoch chains (members without read_with_pieces): each member makes its
    own keys and the blend gathers them, with its member ids."""
    from megadata_core.datasets.scheduled_blend import EpochChain

    config = _config(corpora, "megatron", "best_fit", "single", source_ids=True)
    members = []
    for prefix in corpora[0][:2]:
        indexed = mdc.IndexedDataset(prefix)
        members.append(EpochChain([mdc.GPTDataset(indexed, range(len(indexed)), None, config)]))
    blend = mdc.BlendedDataset(members, [0.5, 0.5], 60, dataclasses.replace(
        config, path_to_cache=None))
    batch = blend.__getitems__(np.arange(60))
    assert (batch["document_ids"] < 0).any() and len(set(batch["dataset_id"].tolist())) == 2
    for row in range(60):
        members_of, documents = token_sources(blend, row, SEQ + 1)
        assert np.array_equal(batch["document_ids"][row], documents[:SEQ]), row
        assert np.array_equal(batch["dataset_ids"][row], members_of[:SEQ]), row


def test_source_ids_of_a_padded_validation_sample(corpora):
    """A concat valid split keeps its last partial sample (padded): -1 past its text."""
    config = _config(corpora, "megatron", "concat", "single", source_ids=True,
                     drop_last_partial_validation_sequence=False,
                     add_extra_token_to_sequence=False)
    valid = mdc.build_datasets(config, [100, None, None])[1]
    positions = np.arange(len(valid))
    batch = valid.__getitems__(positions)
    padded = 0
    for row, position in enumerate(positions.tolist()):
        _, documents = token_sources(valid, position, SEQ)
        assert np.array_equal(batch["document_ids"][row], documents), position
        assert np.array_equal(batch["dataset_ids"][row], np.where(documents >= 0, 0, -1))
        padded += int((documents < 0).any())
    assert padded == 1


def test_source_ids_are_off_by_default_and_change_no_key(corpora, tmp_path):
    fresh = (corpora[0], str(tmp_path / "cache"))
    plain = _train(fresh, "megatron", "best_fit", "blend")
    written = sorted(p.name for p in (tmp_path / "cache").rglob("*"))
    sourced = _train(fresh, "megatron", "best_fit", "blend", source_ids=True)
    assert sorted(p.name for p in (tmp_path / "cache").rglob("*")) == written  # loaded
    assert "dataset_ids" not in plain.__getitems__([0, 1])
    assert fingerprint(plain) == fingerprint(sourced)
    for a, b in zip(plain.datasets, sourced.datasets):
        assert a.description() == b.description()
    ours, theirs = plain.__getitems__(np.arange(20)), sourced.__getitems__(np.arange(20))
    for key, value in ours.items():
        assert np.array_equal(value, theirs[key])


@pytest.mark.parametrize("cp", [2, 4])
def test_source_ids_follow_the_context_parallel_slice(corpora, cp):
    dataset = _train(corpora, "feistel", "best_fit", "blend", source_ids=True,
                     document_masking=True)
    batch = dataset.__getitems__(np.arange(8))
    for rank in range(cp):
        part = context_parallel_slice(batch, rank, cp)
        for key in ("dataset_ids", "document_ids", "tokens"):
            chunk = SEQ // (2 * cp)
            keep = np.r_[rank * chunk:(rank + 1) * chunk,
                         (2 * cp - 1 - rank) * chunk:(2 * cp - rank) * chunk]
            assert np.array_equal(part[key], batch[key][:, keep])
    single = {key: value[0] for key, value in batch.items() if key == "document_ids"}
    with pytest.raises(mdc.DataError, match="document_ids"):
        context_parallel_slice(single, 0, 2)  # an unbatched [S] array: no batch axis


@pytest.mark.parametrize("schedule", [None, "0:8 40:16 100:4"])
@pytest.mark.parametrize("mbs,dp", [(1, 1), (2, 2), (1, 4)])
def test_step_samples_are_the_sequential_samplers(schedule, mbs, dp):
    plan = None if schedule is None else BatchSizeSchedule.parse(schedule)
    total = 400
    per_rank = []
    for rank in range(dp):
        sampler = mdc.samplers.PretrainingSampler(
            total, 0, mbs, rank, dp, batch_size_schedule=plan or BatchSizeSchedule((0,), (8,)))
        per_rank.append([np.concatenate(step) for step in sampler.steps()])
    for step in range(len(per_rank[0])):
        options = dict(global_batch_size=8, schedule=plan, micro_batch_size=mbs,
                       data_parallel_size=dp)
        everything = provenance.step_samples(step, **options)
        assert sorted(everything.tolist()) == sorted(
            np.concatenate([ranks[step] for ranks in per_rank]).tolist())
        for rank in range(dp):
            mine = provenance.step_samples(step, data_parallel_rank=rank, **options)
            assert mine.tolist() == per_rank[rank][step].tolist()
            steps, ranks = provenance.sample_steps(mine, **options)
            assert set(steps.tolist()) == {step} and set(ranks.tolist()) == {rank}


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 70), min_size=1, max_size=40),
    seed=st.integers(0, 2**32 - 1),
    shuffle=st.sampled_from(["megatron", "feistel"]),
    packing=st.sampled_from(["concat", "best_fit"]),
    samples=st.integers(1, 60),
)
def test_batch_and_where_agree_on_any_corpus(tmp_path_factory, lengths, seed, shuffle,
                                             packing, samples):
    """Every segment of every sample is found by where, and nothing else is."""
    if sum(lengths) == 0:
        lengths[0] = 1
    prefix = str(tmp_path_factory.mktemp("any") / "c")
    with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
        for n in lengths:
            writer.add_document(np.arange(1, n + 1), [n])
    config = mdc.GPTDataConfig(random_seed=seed, sequence_length=16, shuffle=shuffle,
                               packing=packing)
    dataset = mdc.GPTDataset(mdc.IndexedDataset(prefix), range(len(lengths)), samples, config)
    segments = provenance.batch_segments(dataset, np.arange(len(dataset)))
    for document in range(len(lengths)):
        expected = np.unique(segments.sample[segments.document == document])
        assert np.array_equal(provenance.where_document(dataset, 0, document),
                              expected)
    walked = [walk(dataset, p)[2] for p in range(len(dataset))]
    assert segments.length.tolist() == [n for one in walked for _, _, n in one]


@pytest.mark.parametrize("call,message", [
    (lambda d: provenance.batch_segments(d, [len(d)]), "indices: sample index out of range"),
    (lambda d: provenance.where_document(d, 3, 0), "member: 3 is outside"),
    (lambda d: provenance.where_document(d, 0, 10**6), "document: 1000000 is outside"),
    (lambda d: provenance.where_document(d, 0, -1), "document"),
    (lambda d: provenance.step_samples(-1, global_batch_size=4), "step"),
    (lambda d: provenance.step_samples(0, global_batch_size=6, micro_batch_size=4),
     "not divisible"),
    (lambda d: provenance.step_samples(0, global_batch_size=4, data_parallel_size=2,
                                       data_parallel_rank=2), "data_parallel_rank"),
    (lambda d: provenance.step_samples(0), "global_batch_size"),
    (lambda d: provenance.step_samples(0, schedule="0:4"), "step_batch_size_schedule"),
])
def test_bad_input_is_a_data_error(corpora, call, message):
    dataset = _train(corpora, "megatron", "concat", "blend")
    with pytest.raises(mdc.DataError, match=message):
        call(dataset)


def test_a_split_of_one_dataset_has_only_member_zero(corpora):
    dataset = _train(corpora, "megatron", "concat", "single")
    assert not hasattr(dataset, "datasets")
    with pytest.raises(mdc.DataError, match="member: 1"):
        provenance.where_document(dataset, 1, 0)
