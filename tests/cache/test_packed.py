"""pack_arrays / unpack_arrays (many small arrays in one cache entry) and cached_result."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from megadata_core.cache import entries as cache
from megadata_core.cache import npy_files as packed_arrays
from megadata_core.errors import DataError


def _arrays():
    rng = np.random.default_rng(0)
    return [
        rng.integers(0, 100, 7).astype(np.int32),
        rng.integers(0, 100, (5, 2)).astype(np.int64),
        np.empty(0, np.uint32),
        np.zeros((0, 2), np.int32),
        rng.integers(0, 3, 9).astype(np.int16),
        np.array([True, False]),
        rng.random(3),
    ]


def test_round_trip_keeps_values_dtypes_and_shapes():
    arrays = _arrays()
    packed = packed_arrays.pack_arrays(arrays)
    assert packed["table"].dtype == np.int64 and packed["blob"].size % packed_arrays.PACK_ALIGN == 0
    for original, unpacked in zip(arrays, packed_arrays.unpack_arrays(**packed), strict=True):
        assert unpacked.dtype == original.dtype and unpacked.shape == original.shape
        np.testing.assert_array_equal(unpacked, original)
    assert packed_arrays.unpack_arrays(**packed_arrays.pack_arrays([])) == []


def test_round_trip_through_the_cache_is_read_only(tmp_path):
    arrays = _arrays()
    description = {"kind": "test", "count": len(arrays)}
    result = cache.cached_result(
        str(tmp_path), description, "bundle", ("table", "blob"),
        use=pytest.fail, build=lambda: ("built", packed_arrays.pack_arrays(arrays)),
    )
    assert result == "built"
    loaded = cache.cached_result(
        str(tmp_path), description, "bundle", ("table", "blob"),
        use=lambda found: packed_arrays.unpack_arrays(found["table"], found["blob"]),
        build=pytest.fail,
    )
    for original, unpacked in zip(arrays, loaded, strict=True):
        np.testing.assert_array_equal(unpacked, original)
        assert unpacked.size == 0 or not unpacked.flags.writeable


@pytest.mark.parametrize("column, value", [(0, 1 << 40), (0, 3), (1, 99), (1, -1), (2, -2)])
def test_a_damaged_table_is_a_data_error(column, value):
    packed = packed_arrays.pack_arrays(_arrays())
    packed["table"][1, column] = value
    with pytest.raises(DataError, match="bundle"):
        packed_arrays.unpack_arrays(packed["table"], packed["blob"], "bundle")


def test_unpackable_arrays_are_refused():
    with pytest.raises(DataError, match="cannot be packed"):
        packed_arrays.pack_arrays([np.zeros((2, 2, 2), np.int32)])
    with pytest.raises(DataError, match="cannot be packed"):
        packed_arrays.pack_arrays([np.array(["a"])])


def test_a_use_error_rebuilds_with_a_warning(tmp_path):
    description = {"kind": "test"}
    arrays = packed_arrays.pack_arrays(_arrays())
    cache.cached_result(str(tmp_path), description, "bundle", ("table", "blob"),
                        use=pytest.fail, build=lambda: (1, arrays))

    def refuse(found):
        raise DataError("does not fit")

    with pytest.warns(UserWarning, match="does not fit; rebuilding"):
        result = cache.cached_result(str(tmp_path), description, "bundle", ("table", "blob"),
                                     use=refuse, build=lambda: (2, arrays))
    assert result == 2
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]


def test_a_description_that_differs_from_its_key_is_refused(tmp_path):
    description = {"kind": "test", "values": [1, 2]}
    arrays = packed_arrays.pack_arrays(_arrays())
    cache.cached_result(str(tmp_path), description, "bundle", ("table", "blob"),
                        use=pytest.fail, build=lambda: (1, arrays))
    (record,) = [name for name in os.listdir(tmp_path) if name.endswith("description.json")]
    path = os.path.join(tmp_path, record)
    with open(path) as stream:
        text = stream.read()
    record = json.loads(text)
    record["description"]["values"][0] = 3
    with open(path, "w") as stream:
        json.dump(record, stream)
    with pytest.raises(DataError, match="does not match its key"):
        cache.load_cached(str(tmp_path), description, "bundle", ("table", "blob"))
    # a tuple in the expected description parses back as a list: still a hit
    tupled = {"kind": "test", "values": (1, 2)}
    with open(path, "w") as stream:
        stream.write(text)
    assert cache.load_cached(str(tmp_path), tupled, "bundle", ("table", "blob")) is not None


def test_packed_arrays_make_views_on_access_and_pickle_the_blob_by_name(tmp_path):
    import pickle

    arrays = _arrays()
    packed = packed_arrays.pack_arrays(arrays)
    path = str(tmp_path / "blob.npy")
    np.save(path, packed["blob"])
    views = packed_arrays.PackedArrays(packed["table"], np.load(path, mmap_mode="r"))
    assert len(views) == len(arrays)
    assert views.rows.tolist() == [len(array) for array in arrays]
    for original, view in zip(arrays, views, strict=True):
        np.testing.assert_array_equal(view, original)
        assert view.dtype == original.dtype and view.shape == original.shape
    shipped = pickle.dumps(views)
    assert packed["blob"].tobytes() not in shipped
    for original, view in zip(arrays, pickle.loads(shipped), strict=True):
        np.testing.assert_array_equal(view, original)
