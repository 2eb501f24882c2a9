"""megadata_core.handover.pack: a packed batch unpacks to the same, independent arrays."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from megadata_core.handover import pack


def core_like_batch(batch: int = 3, length: int = 5) -> dict[str, np.ndarray]:
    text = np.arange(batch * (length + 1), dtype=np.int32).reshape(batch, length + 1)
    text.flags.writeable = False
    ones = np.ones((batch, length), np.float32)
    ones.flags.writeable = False
    positions = np.broadcast_to(np.arange(length), (batch, length)).copy()
    positions.flags.writeable = False
    return {
        "tokens": text[:, :-1],
        "labels": text[:, 1:],
        "loss_mask": ones,
        "position_ids": positions,
        "extra": np.full((batch, 2), 7, np.int64),  # writable: shipped as is
    }


def test_text_of_and_recipes():
    batch = core_like_batch()
    text = pack.text_of(batch["tokens"], batch["labels"])
    np.testing.assert_array_equal(text[:, :-1], batch["tokens"])
    np.testing.assert_array_equal(text[:, 1:], batch["labels"])
    assert pack.text_of(batch["tokens"], batch["labels"].copy()) is None
    assert pack.text_of(batch["tokens"], batch["tokens"]) is None
    assert pack.recipe_of(batch["loss_mask"]) == ("full", 1.0)
    assert pack.recipe_of(batch["position_ids"]) == ("arange",)
    assert pack.recipe_of(np.array([[1, 2], [2, 1]])) is None
    assert pack.is_constant(batch["loss_mask"]) and not pack.is_constant(batch["extra"])
    assert not pack.is_constant(batch["tokens"])  # a view


@pytest.mark.parametrize("dtypes", [None, {"tokens": np.int64, "loss_mask": np.float64}])
def test_pack_pickle_unpack_round_trip(dtypes):
    batch = core_like_batch()
    packed = pack.Packer()(batch)
    assert packed.text is not None and set(packed.arrays) == {"extra"}
    assert set(packed.constants) == {"loss_mask", "position_ids"}
    shipped = pickle.loads(pickle.dumps(packed))
    out = pack.unpack_arrays(shipped, dtypes=dtypes)
    assert list(out) == list(batch)
    for key, value in batch.items():
        np.testing.assert_array_equal(out[key], value, err_msg=key)
        assert out[key].flags.writeable and out[key].flags.c_contiguous
        if dtypes and key in dtypes:
            assert out[key].dtype == dtypes[key]
    for key in out:  # independent of each other
        for other in out:
            assert key == other or not np.shares_memory(out[key], out[other])


def test_a_batch_without_the_text_layout_ships_every_key():
    batch = {"tokens": np.zeros((2, 3), np.int32), "labels": np.ones((2, 3), np.int32)}
    packed = pack.Packer()(batch)
    assert packed.text is None and set(packed.arrays) == {"tokens", "labels"}
    out = pack.unpack_arrays(packed)
    np.testing.assert_array_equal(out["labels"], batch["labels"])


def test_view_arrays_gives_the_core_layout_without_copies():
    batch = core_like_batch()
    constants: dict = {}
    views = []
    for _ in range(3):
        shipped = pickle.loads(pickle.dumps(pack.Packer()(batch)))
        out = pack.view_arrays(shipped, constants)
        assert list(out) == list(batch)
        for key, value in batch.items():
            np.testing.assert_array_equal(out[key], value, err_msg=key)
            assert out[key].dtype == value.dtype and not out[key].flags.writeable, key
        assert np.shares_memory(out["tokens"], shipped.text)  # views, not copies
        assert pack.text_of(out["tokens"], out["labels"]) is not None
        assert pack.is_constant(out["loss_mask"]) and pack.is_constant(out["position_ids"])
        views.append(out)
    assert views[0]["loss_mask"] is views[2]["loss_mask"]  # one array per constant
    assert len(constants) == 2
    with pytest.raises(ValueError):
        views[0]["tokens"][0, 0] = 1


def test_view_arrays_keeps_a_bounded_number_of_constants():
    constants: dict = {}
    for length in range(1, pack.CONSTANTS_KEPT + 5):
        packed = pack.Packer()(core_like_batch(length=length))
        pack.view_arrays(packed, constants)
        assert len(constants) <= pack.CONSTANTS_KEPT
