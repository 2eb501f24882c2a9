"""A conversation corpus in an object store (S3, GCS, HTTP on 127.0.0.1) keeps its roles:
the remote samples' loss mask equals the local copy's, and a store that does not hold a
roles sibling reads the corpus as plain text (never a conversation read as plain)."""

from __future__ import annotations

import numpy as np
import pytest

import megadata_core as mdc
from megadata_core.format.roles import Role, has_roles, roles_prefix


def _conversation_corpus(prefix: str) -> None:
    rng = np.random.default_rng(3)
    with mdc.IndexedDatasetWriter(prefix, dtype=np.int32) as tokens, \
            mdc.IndexedDatasetWriter(roles_prefix(prefix), dtype=np.uint8) as roles:
        for _ in range(60):
            length = int(rng.integers(5, 40))
            tokens.add_document(rng.integers(1, 1000, length), [length])
            codes = rng.choice([Role.TEMPLATE, Role.USER, Role.ASSISTANT, Role.END_OF_TURN],
                               length).astype(np.uint8)
            roles.add_document(codes, [length])


def test_a_remote_conversation_corpus_keeps_its_roles(store, local_corpora, tmp_path):
    local = str(tmp_path / "chat")
    _conversation_corpus(local)
    for prefix in (local, roles_prefix(local)):
        for ext in (".bin", ".idx"):
            with open(prefix + ext, "rb") as stream:
                store.put(f"corpora/{prefix[len(str(tmp_path)) + 1:]}{ext}", stream.read())
    assert has_roles(store.url("chat")) and not has_roles(store.url("web"))
    assert not has_roles(str(tmp_path / "missing"))
    batches = []
    for prefix in (store.url("chat"), local):
        config = mdc.GPTDataConfig(random_seed=2, sequence_length=32, blend=([prefix], None),
                                   split="100,0,0", packing="best_fit", pad_id=0,
                                   path_to_cache=str(tmp_path / ("cache_" + str(len(batches)))))
        train = mdc.build_datasets(config, [40, None, None])[0]
        batches.append(train.__getitems__(np.arange(16)))
    remote, expected = batches
    assert remote.keys() == expected.keys()
    for key in expected:
        np.testing.assert_array_equal(remote[key], expected[key], err_msg=key)
    assert 0 < expected["loss_mask"].mean() < 1  # the roles shaped it


def test_a_store_that_cannot_answer_is_an_error_not_plain_text(monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(mdc.DataError) as error:
        has_roles("s3://bucket/corpora/chat")
    assert "not found" not in str(error.value).lower()
