"""best_fit with ``packing_alignment`` (THD for context parallelism): the padded layout,
``cu_seqlens`` / ``cu_seqlens_padded``, pads outside the loss, and the per-document
zig-zag of ``context_parallel_slice(layout="thd")``, checked against oracles written from
the definitions (per sample, in Python loops)."""

from __future__ import annotations

import numpy as np
import pytest
from corpora import write_corpus
from hypothesis import given, settings
from hypothesis import strategies as st

import megadata_core as mdc
from megadata_core.datasets.context_parallel import thd_positions

STRIDE = 1 << 16  # token = document * STRIDE + offset + 1: every token says where it is from


def _corpus(prefix: str, lengths) -> str:
    lengths = np.asarray(lengths, dtype=np.int64)
    document = np.repeat(np.arange(len(lengths)), lengths)
    offset = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return write_corpus(prefix, lengths, tokens=document * STRIDE + offset + 1, dtype=np.int32)


def _dataset(prefix: str, sequence_length: int, alignment: int | None, seed: int = 3,
             samples: int | None = None, **options):
    config = mdc.GPTDataConfig(
        random_seed=seed, sequence_length=sequence_length, pad_id=0, packing="best_fit",
        document_masking=True, packing_alignment=alignment, **options,
    )
    indexed = mdc.IndexedDataset(prefix)
    return mdc.GPTDataset(indexed, np.arange(len(indexed)), samples, config)


def _segments(row: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of the non-empty segments of one cu_seqlens_padded row."""
    return [(int(a), int(b)) for a, b in zip(row[:-1], row[1:]) if b > a]


def _zigzag_oracle(row: np.ndarray, rank: int, cp: int) -> list[int]:
    """Positions of ``rank``: for each segment of padded length L, chunks rank and
    2 cp - 1 - rank of size L / (2 cp)."""
    kept = []
    for start, end in _segments(row):
        chunk = (end - start) // (2 * cp)
        for c in (rank, 2 * cp - 1 - rank):
            kept.extend(range(start + c * chunk, start + (c + 1) * chunk))
    return kept


def _check_batch(batch: dict, lengths: np.ndarray, alignment: int, size: int, seen: set):
    """Every invariant of one THD batch; adds the (document, offset) of its real tokens
    to ``seen`` (each must be new)."""
    tokens, loss = batch["tokens"], batch["loss_mask"]
    for b in range(len(tokens)):
        padded, real = batch["cu_seqlens_padded"][b], batch["cu_seqlens"][b]
        assert padded.dtype == np.int32 and real.dtype == np.int32
        assert padded[0] == 0 and padded[-1] == size and (np.diff(padded) >= 0).all()
        assert (np.diff(padded) % alignment == 0).all()  # every padded length aligned
        assert batch["max_seqlen"][b] == np.diff(padded).max()
        widths, real_widths = np.diff(padded), np.diff(real)
        assert (real_widths >= 0).all() and (real_widths <= widths).all()
        assert (widths - real_widths < alignment).all()  # padding < alignment per document
        segments = _segments(padded)
        tail_start = segments[-1][0] if segments else 0
        for number, (start, end) in enumerate(segments):
            at = int(np.searchsorted(padded, start, side="right"))  # segment index + 1
            count = int(real[at] - real[at - 1])
            run = tokens[b, start:end].astype(np.int64)
            is_tail = number == len(segments) - 1 and (run == 0).all()
            if is_tail:  # the trailing padding: a segment of its own, counted whole
                assert count == end - start
                assert (batch["segment_ids"][b, start:end] == 0).all()
                continue
            assert tail_start >= start or number < len(segments) - 1
            body, pad = run[:count], run[count:]
            assert (pad == 0).all() and (body > 0).all()
            document, offset = (body - 1) // STRIDE, (body - 1) % STRIDE
            assert (document == document[0]).all()  # one document per segment
            assert (np.diff(offset) == 1).all()  # its tokens in order
            doc = int(document[0])
            assert offset[-1] < lengths[doc]
            # the padded length is the piece's length rounded up (placed by it)
            assert end - start == -(-count // alignment) * alignment
            for o in offset.tolist():
                assert (doc, o) not in seen
                seen.add((doc, o))
            assert (batch["segment_ids"][b, start:start + count] > 0).all()
            assert (batch["segment_ids"][b, start + count:end] == 0).all()
            np.testing.assert_array_equal(batch["position_ids"][b, start:end],
                                          np.arange(end - start))
        pads = batch["segment_ids"][b] == 0
        assert (tokens[b][pads] == 0).all()
        assert (loss[b][pads] == 0).all()  # padding never in the loss
        assert (loss[b][batch["labels"][b] == 0] == 0).all()


@pytest.mark.parametrize("cp", [1, 2, 4, 8])
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_thd_properties(tmp_path_factory, cp, data):
    alignment = 2 * cp
    size = alignment * data.draw(st.integers(1, 6), label="units per sample")
    lengths = np.array(data.draw(st.lists(st.integers(1, 3 * size), min_size=1, max_size=30),
                                 label="lengths"))
    prefix = _corpus(str(tmp_path_factory.mktemp("thd") / "corpus"), lengths)
    dataset = _dataset(prefix, size, alignment, seed=data.draw(st.integers(0, 99)))
    batch = dataset.__getitems__(list(range(len(dataset))))  # one epoch: every sample
    seen: set = set()
    _check_batch(batch, lengths, alignment, size, seen)
    assert len(seen) == int(lengths.sum())  # every token of the epoch exactly once
    parts = [mdc.context_parallel_slice(batch, rank, cp, layout="thd") for rank in range(cp)]
    for rank, part in enumerate(parts):
        positions = thd_positions(batch["cu_seqlens_padded"], rank, cp)
        assert part["tokens"].shape == (len(dataset), size // cp)  # equal on every rank
        for b in range(len(dataset)):
            expected = _zigzag_oracle(batch["cu_seqlens_padded"][b], rank, cp)
            assert positions[b].tolist() == expected
            for key in ("tokens", "labels", "loss_mask", "position_ids", "segment_ids"):
                np.testing.assert_array_equal(part[key][b], batch[key][b, expected])
            np.testing.assert_array_equal(part["attention_mask"][b, 0],
                                          batch["attention_mask"][b, 0, expected])
        for key in ("cu_seqlens", "cu_seqlens_padded", "max_seqlen"):
            assert part[key] is batch[key]
    union = np.sort(np.concatenate([thd_positions(batch["cu_seqlens_padded"], r, cp)
                                    for r in range(cp)], axis=1), axis=1)
    np.testing.assert_array_equal(union, np.broadcast_to(np.arange(size), union.shape))


def test_documents_are_placed_by_padded_length(tmp_path):
    """Four documents of 3 tokens, S = 8: unaligned best fit puts two in a sample of
    S + 1 = 9 (with room), aligned to 4 each takes 4, so two a sample, no third."""
    prefix = _corpus(str(tmp_path / "c"), [3, 3, 3, 3, 5])
    loose = _dataset(prefix, 8, None)
    aligned = _dataset(prefix, 8, 4)
    assert len(loose) == 2 and len(aligned) == 3
    batch = aligned.__getitems__([0, 1, 2])
    rows = sorted(batch["cu_seqlens_padded"][:, :4].tolist())
    assert rows == [[0, 4, 8, 8], [0, 4, 8, 8], [0, 8, 8, 8]]
    reals = sorted(batch["cu_seqlens"][:, :4].tolist())
    assert reals == [[0, 3, 6, 6], [0, 3, 6, 6], [0, 5, 5, 5]]


def test_long_documents_are_cut_into_samples(tmp_path):
    """A document of 2 S - 1 tokens, alignment 4: one full sample and a piece of S - 1
    (padded to S): a cut one piece longer than S - a, so placed whole."""
    prefix = _corpus(str(tmp_path / "c"), [15, 2])
    dataset = _dataset(prefix, 8, 4)
    batch = dataset.__getitems__(list(range(len(dataset))))
    seen: set = set()
    _check_batch(batch, np.array([15, 2]), 4, 8, seen)
    assert len(seen) == 17 and len(dataset) == 3


def test_alignment_through_epochs_and_cache(tmp_path):
    """Several epochs, a cache entry: the same samples as in memory; the alignment is
    part of the entry's key (two alignments, two entries)."""
    prefix = _corpus(str(tmp_path / "c"), np.arange(1, 30))
    cache = str(tmp_path / "cache")
    warm = {}
    for alignment in (2, 4):
        memory = _dataset(prefix, 16, alignment, samples=100)
        cached = _dataset(prefix, 16, alignment, samples=100, path_to_cache=cache)
        assert len(memory) == len(cached) >= 100
        a, b = memory.__getitems__(list(range(100))), cached.__getitems__(list(range(100)))
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        assert (np.diff(a["cu_seqlens_padded"], axis=1) % alignment == 0).all()
        warm[alignment] = a
    assert not np.array_equal(warm[2]["cu_seqlens_padded"], warm[4]["cu_seqlens_padded"])
    import glob

    described = glob.glob(f"{cache}/**/*description*", recursive=True)
    texts = [open(path).read() for path in described]
    assert sum('"packing_alignment": 2' in t for t in texts) >= 1
    assert sum('"packing_alignment": 4' in t for t in texts) >= 1


def test_stored_alignment_must_match_the_config(tmp_path):
    prefix = _corpus(str(tmp_path / "c"), [3, 5, 7])
    dataset = _dataset(prefix, 8, 4)
    arrays = dict(dataset._arrays)
    shape = arrays["packed_shape"].copy()
    shape[4] = 2
    arrays["packed_shape"] = shape
    with pytest.raises(mdc.DataError, match="packed_shape: alignment 2 != 4"):
        dataset._set_views(arrays)
    arrays["packed_shape"] = shape[:4]
    with pytest.raises(mdc.DataError, match="packed_shape"):
        dataset._set_views(arrays)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"packing_alignment": 0}, "packing_alignment: 0 must be >= 1"),
        ({"packing_alignment": -4}, "packing_alignment: -4 must be >= 1"),
        ({"packing_alignment": 2.0}, "packing_alignment: 2.0 is not an int"),
        ({"packing_alignment": True}, "packing_alignment: True is not an int"),
        ({"packing_alignment": "4"}, "packing_alignment: '4' is not an int"),
        ({"packing_alignment": 32}, "larger than sequence_length 16"),
        ({"packing_alignment": 6}, "sequence_length 16 is not a multiple of 6"),
        ({"packing_alignment": 4, "packing": "concat"}, "needs packing='best_fit'"),
        ({"packing_alignment": 4, "document_masking": False}, "document_masking=True"),
    ],
)
def test_bad_packing_alignment(options, match):
    base = {"random_seed": 1, "sequence_length": 16, "packing": "best_fit",
            "document_masking": True}
    with pytest.raises(mdc.DataError, match=match):
        mdc.GPTDataConfig(**{**base, **options})


def test_numpy_alignment_is_taken():
    config = mdc.GPTDataConfig(random_seed=1, sequence_length=16, packing="best_fit",
                               document_masking=True, packing_alignment=np.int64(4))
    assert config.packing_alignment == 4 and type(config.packing_alignment) is int


def _thd_batch():
    padded = np.array([[0, 4, 8, 8, 8, 8, 8, 8, 8]], dtype=np.int32)
    return {"tokens": np.arange(8)[None], "cu_seqlens_padded": padded,
            "cu_seqlens": padded.copy(), "max_seqlen": np.array([4])}


@pytest.mark.parametrize(
    ("change", "args", "match"),
    [
        (lambda b: b.pop("cu_seqlens_padded"), (0, 2), "cu_seqlens_padded.*missing"),
        (lambda b: None, (0, 4), "segment of 4 tokens is not divisible by 2 x cp_size = 8"),
        (lambda b: b.update(cu_seqlens_padded=b["cu_seqlens_padded"][:, ::-1].copy()),
         (0, 2), "non-decreasing"),
        (lambda b: b.update(cu_seqlens_padded=np.zeros((1, 9), np.float32)), (0, 2),
         "expected int"),
        (lambda b: b.update(tokens=np.arange(12)[None]), (0, 2), "does not match"),
        (lambda b: None, (2, 2), "cp_rank: 2 is out of range"),
    ],
)
def test_bad_thd_batches(change, args, match):
    batch = _thd_batch()
    change(batch)
    with pytest.raises(mdc.DataError, match=match):
        mdc.context_parallel_slice(batch, *args, layout="thd")


def test_bad_layout():
    with pytest.raises(mdc.DataError, match="layout: 'sbhd' is not one of"):
        mdc.context_parallel_slice(_thd_batch(), 0, 2, layout="sbhd")


def test_thd_hand_example():
    """Documents of padded lengths 4 and 4 at cp = 2: chunks of 1; rank 0 takes 0 and 3
    of each, rank 1 takes 1 and 2."""
    batch = _thd_batch()
    assert mdc.context_parallel_slice(batch, 0, 2, layout="thd")["tokens"].tolist() == [
        [0, 3, 4, 7]]
    assert mdc.context_parallel_slice(batch, 1, 2, layout="thd")["tokens"].tolist() == [
        [1, 2, 5, 6]]


def test_source_ids_mark_the_padding_between_documents(tmp_path):
    """With ``source_ids`` the pads inside the THD layout are -1 like the tail's, and every
    real token names its document (its token says which), alone and in a blend."""
    lengths = np.arange(1, 40)
    prefix = _corpus(str(tmp_path / "c"), lengths)
    dataset = _dataset(prefix, 16, 4, source_ids=True)
    batch = dataset.__getitems__(list(range(len(dataset))))
    real = batch["segment_ids"] != 0
    assert (~real).any() and (batch["document_ids"][~real] == -1).all()
    assert (batch["dataset_ids"][~real] == -1).all() and (batch["dataset_ids"][real] == 0).all()
    np.testing.assert_array_equal(batch["document_ids"][real],
                                  (batch["tokens"][real] - 1) // STRIDE)
    config = mdc.GPTDataConfig(
        random_seed=3, sequence_length=16, pad_id=0, packing="best_fit",
        document_masking=True, packing_alignment=4, source_ids=True,
        blend=([prefix, _corpus(str(tmp_path / "d"), lengths[::-1])], [0.5, 0.5]),
        split="1,0,0",
    )
    train = mdc.build_datasets(config, [30, 0, 0])[0]
    blended = train.__getitems__(list(range(30)))
    real = blended["segment_ids"] != 0
    assert (blended["document_ids"][~real] == -1).all()
    assert (blended["dataset_ids"][~real] == -1).all()
    assert set(np.unique(blended["dataset_ids"][real]).tolist()) == {0, 1}
    np.testing.assert_array_equal(blended["document_ids"][real],
                                  (blended["tokens"][real] - 1) // STRIDE)
