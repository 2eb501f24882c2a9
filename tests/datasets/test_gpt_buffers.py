"""GPTDataset.with_token_dtype: one dataset's indices, batches of another dtype."""

from __future__ import annotations

import numpy as np
from corpora import write_corpus

import megadata_core as mdc


def _dataset(tmp_path, **kw):
    prefix = str(tmp_path / "corpus")
    rng = np.random.default_rng(3)
    write_corpus(prefix, rng.integers(3, 30, 50), rng, low=1, vocab=500)
    config = mdc.GPTDataConfig(random_seed=5, sequence_length=16, eod_id=0, **kw)
    return mdc.GPTDataset(mdc.IndexedDataset(prefix), np.arange(50), None, config)


def test_with_token_dtype_shares_indices_and_equals_values(tmp_path):
    ds = _dataset(tmp_path, reset_position_ids=True)
    assert ds.with_token_dtype(np.int32) is ds
    wide = ds.with_token_dtype(np.int64)
    assert wide.token_dtype == np.int64 and ds.token_dtype == np.int32
    assert wide.sample_index is ds.sample_index and len(wide) == len(ds)
    indices = [0, 7, len(ds) - 1]
    narrow_batch, wide_batch = ds.__getitems__(indices), wide.__getitems__(indices)
    for key, value in narrow_batch.items():
        np.testing.assert_array_equal(wide_batch[key], value, err_msg=key)
    assert wide_batch["tokens"].dtype == wide_batch["position_ids"].dtype == np.int64
    assert wide_batch["loss_mask"].dtype == np.float32
    try:
        ds.with_token_dtype(np.float32)
    except mdc.DataError as error:
        assert "token_dtype" in str(error)
    else:
        raise AssertionError("float32 tokens accepted")
