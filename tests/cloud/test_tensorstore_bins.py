"""TensorStore reads of corpora in real S3, GCS and HTTP servers on 127.0.0.1 equal the
local copy."""

from __future__ import annotations

import glob
import os
import pickle
import threading

import numpy as np
import pytest
from cloud_helpers import CORPORA, EOD, configure_cache

import megadata_core as mdc
from loopback.object_stores import FaultProxy, MotoS3Server, free_port
from megadata_adapters.storage import tensorstore_bins


def assert_same_items(remote: mdc.IndexedDataset, local: mdc.IndexedDataset) -> None:
    assert len(remote) == len(local)
    assert remote.dtype == local.dtype
    np.testing.assert_array_equal(remote.document_indices, local.document_indices)
    for index in range(len(local)):
        np.testing.assert_array_equal(remote[index], local[index], err_msg=f"sequence {index}")


def gpt_config(
    prefixes: list[str], cache: str, weights=(0.6, 0.4), **options
) -> mdc.GPTDataConfig:
    blend = " ".join(f"{weight} {prefix}" for weight, prefix in zip(weights, prefixes))
    return mdc.GPTDataConfig(
        random_seed=5,
        sequence_length=128,
        eod_id=EOD,
        blend=blend,
        split="90,10,0",
        path_to_cache=cache,
        **options,
    )


def test_every_item_partial_get_and_slice_equal_local(store, local_corpora):
    for name in CORPORA:
        remote = mdc.IndexedDataset(store.url(name))
        local = mdc.IndexedDataset(local_corpora[name])
        assert_same_items(remote, local)
        lengths = local.sequence_lengths
        longest = int(np.argmax(lengths))
        np.testing.assert_array_equal(remote.get(longest, 5, 40), local.get(longest, 5, 40))
        np.testing.assert_array_equal(remote.get(longest, 7), local.get(longest, 7))
        for remote_piece, local_piece in zip(remote[10:25], local[10:25]):
            np.testing.assert_array_equal(remote_piece, local_piece)


@pytest.mark.parametrize(
    "options",
    [{}, {"packing": "best_fit", "document_masking": True, "pad_id": 0}],
    ids=["concat", "best_fit_masked"],
)
def test_gpt_and_blended_batches_equal_local(store, local_corpora, tmp_path, options):
    remote_sets = mdc.build_datasets(
        gpt_config([store.url(name) for name in CORPORA], str(tmp_path / "remote_cache"),
                   **options),
        [400, 40, None],
    )
    local_sets = mdc.build_datasets(
        gpt_config([local_corpora[name] for name in CORPORA], str(tmp_path / "local_cache"),
                   **options),
        [400, 40, None],
    )
    rng = np.random.default_rng(0)
    for remote, local in zip(remote_sets[:2], local_sets[:2]):
        assert len(remote) == len(local)
        for _ in range(3):
            batch = rng.integers(0, len(local), 32)
            ours, expected = remote.__getitems__(batch), local.__getitems__(batch)
            assert ours.keys() == expected.keys()
            for key in expected:
                np.testing.assert_array_equal(ours[key], expected[key], err_msg=key)
        member = remote.datasets[0]  # one GPT member: its own batched read
        batch = rng.integers(0, len(member), 16)
        np.testing.assert_array_equal(
            member.__getitems__(batch)["tokens"], local.datasets[0].__getitems__(batch)["tokens"]
        )
        np.testing.assert_array_equal(member[3]["tokens"], local.datasets[0][3]["tokens"])


def test_batched_ranges_go_out_together_and_coalesce(store, local_corpora, monkeypatch):
    proxy = FaultProxy(store.endpoint, fail_rate=0.0)
    try:
        store.route(monkeypatch, proxy.endpoint)
        source = tensorstore_bins.TensorStoreSource(store.url("web") + ".bin")
        local = open(local_corpora["web"] + ".bin", "rb").read()
        # 64 ranges of 500 bytes, 1 KiB apart, asked for out of order.
        offsets = np.random.default_rng(1).permutation(np.arange(64) * 1500)
        lengths = np.full(64, 500)
        proxy.reset_counts()
        buffers = source.read_ranges(offsets, lengths)
        for offset, length, data in zip(offsets, lengths, buffers):
            assert bytes(data) == local[offset : offset + length]
        assert 1 <= proxy.requests < 64 / 4, proxy.requests  # near ranges merge into few requests
    finally:
        proxy.stop()


def test_idx_is_cached_then_refetched_when_the_object_changes(store, local_corpora, tmp_path):
    cache = tmp_path / "idx_cache"
    first = mdc.IndexedDataset(store.url("web"))
    copies = glob.glob(str(cache / "*.idx"))
    assert len(copies) == 1
    stamp = os.stat(copies[0]).st_mtime_ns
    again = mdc.IndexedDataset(store.url("web"))  # validated, not fetched again
    assert glob.glob(str(cache / "*.idx")) == copies
    assert os.stat(copies[0]).st_mtime_ns == stamp
    assert len(again) == len(first)

    replacement = local_corpora["replacement"]
    key = "corpora/updated"
    for ext in ("bin", "idx"):
        store.put(f"{key}.{ext}", open(f"{local_corpora['web']}.{ext}", "rb").read())
    url = store.url("updated")
    assert_same_items(mdc.IndexedDataset(url), mdc.IndexedDataset(local_corpora["web"]))
    for ext in ("bin", "idx"):
        store.put(f"{key}.{ext}", open(f"{replacement}.{ext}", "rb").read())
    assert_same_items(mdc.IndexedDataset(url), mdc.IndexedDataset(replacement))
    stems = {os.path.basename(path).split("-")[0] for path in glob.glob(str(cache / "*.idx"))}
    assert len(glob.glob(str(cache / "*.idx"))) == len(stems)  # the stale copy was replaced


def test_injected_server_errors_still_give_identical_bytes(
    store, local_corpora, faulty_proxy, monkeypatch, tmp_path
):
    store.route(monkeypatch, faulty_proxy.endpoint)
    fast_retries = {"max_retries": 20, "initial_delay": "5ms", "max_delay": "50ms"}
    configure_cache(
        monkeypatch,
        tmp_path / "idx_cache",
        context={f"{driver}_request_retries": fast_retries for driver in ("s3", "gcs", "http")},
    )
    remote = mdc.IndexedDataset(store.url("code"))
    local = mdc.IndexedDataset(local_corpora["code"])
    assert_same_items(remote, local)
    (remote_train, _, _), (local_train, _, _) = (
        mdc.build_datasets(gpt_config([prefix], str(tmp_path / tag), weights=(1.0,)), [300, 0, 0])
        for prefix, tag in ((store.url("code"), "remote"), (local_corpora["code"], "local"))
    )
    batch = np.random.default_rng(2).integers(0, len(local_train), 32)
    np.testing.assert_array_equal(
        remote_train.__getitems__(batch)["tokens"], local_train.__getitems__(batch)["tokens"]
    )
    assert faulty_proxy.failed > 0 and faulty_proxy.requests > faulty_proxy.failed


def test_pickles_small_and_reads_after_unpickling(store, local_corpora):
    remote = mdc.IndexedDataset(store.url("web"))
    remote[0]
    data = pickle.dumps(remote)
    assert len(data) < 2000
    copy = pickle.loads(data)
    assert_same_items(copy, mdc.IndexedDataset(local_corpora["web"]))


def test_missing_object_names_the_url(store):
    url = store.url("no_such_corpus")
    with pytest.raises(mdc.DataError, match=f"{url}.idx: not found"):
        mdc.IndexedDataset(url)


@pytest.mark.parametrize("idx_bytes", [b"", b"MMIDIDX\x00\x00"])
def test_empty_or_truncated_remote_idx_is_rejected(store, local_corpora, idx_bytes):
    store.put("corpora/broken.idx", idx_bytes)
    store.put("corpora/broken.bin", open(local_corpora["web"] + ".bin", "rb").read())
    with pytest.raises(mdc.DataError, match="broken.idx"):
        mdc.IndexedDataset(store.url("broken"))


def test_bin_shorter_than_its_index_is_rejected(store, local_corpora):
    prefix = local_corpora["web"]
    store.put("corpora/short.idx", open(prefix + ".idx", "rb").read())
    store.put("corpora/short.bin", open(prefix + ".bin", "rb").read()[:-10])
    with pytest.raises(mdc.DataError, match="short.bin: the object is shorter than"):
        mdc.IndexedDataset(store.url("short"))


def _raises_within(action, limit_s: float) -> BaseException:
    """The exception ``action`` raises; fails the test if it is still running after
    ``limit_s`` (a hang), not on how fast it was."""
    outcome: list = []

    def run():
        try:
            action()
        except BaseException as error:  # noqa: BLE001 - handed to the test
            outcome.append(error)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert outcome, f"still waiting after {limit_s} s"
    assert outcome[0] is not None, "no error raised"
    return outcome[0]


def test_server_down_is_a_data_error_not_a_hang(store, monkeypatch):
    dead = f"http://127.0.0.1:{free_port()}"
    store.route(monkeypatch, dead)
    url = store.url("web")
    error = _raises_within(lambda: mdc.IndexedDataset(url), 120)
    assert isinstance(error, mdc.DataError)
    assert url in str(error) and "cannot reach the store" in str(error)


def test_wrong_s3_credentials_are_a_data_error(monkeypatch, tmp_path):
    server = MotoS3Server(auth=True)  # checks keys against its own IAM: ours are unknown
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG1")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
        configure_cache(monkeypatch, tmp_path)
        with pytest.raises(mdc.DataError, match="access denied") as raised:
            mdc.IndexedDataset("s3://some-bucket/corpora/web")
        assert "s3://some-bucket/corpora/web.idx" in str(raised.value)
        assert "http_response_body" not in str(raised.value)
    finally:
        server.stop()


@pytest.mark.parametrize("status", [401, 403])
def test_rejected_credentials_are_a_data_error(store, monkeypatch, status):
    proxy = FaultProxy(store.endpoint)
    proxy.status = status  # as a store answers a bad token or key
    try:
        store.route(monkeypatch, proxy.endpoint)
        with pytest.raises(mdc.DataError, match="access denied") as raised:
            mdc.IndexedDataset(store.url("web"))
        assert "http_response_body" not in str(raised.value)
    finally:
        proxy.stop()


def test_read_only_cache_dir_falls_back_with_a_warning(store, local_corpora, monkeypatch, tmp_path):
    if os.geteuid() == 0:
        readonly = tmp_path / "not_a_dir"
        readonly.write_text("a file where the cache directory should be")
        cache = readonly / "cache"
    else:
        cache = tmp_path / "readonly"
        cache.mkdir()
        cache.chmod(0o500)
    configure_cache(monkeypatch, cache)
    with pytest.warns(UserWarning, match="cannot write the .idx cache"):
        remote = mdc.IndexedDataset(store.url("web"))
    assert_same_items(remote, mdc.IndexedDataset(local_corpora["web"]))


def test_torch_loader_workers_read_remote_corpora(store, local_corpora, tmp_path):
    torch_data = pytest.importorskip("megadata_adapters.frameworks.torch_data")
    remote, local = (
        mdc.build_datasets(gpt_config([prefix], str(tmp_path / tag), weights=(1.0,)), [64, 0, 0])[0]
        for prefix, tag in ((store.url("web"), "remote"), (local_corpora["web"], "local"))
    )
    remote[0]  # TensorStore runs in this process: a forked worker would abort
    sampler = mdc.samplers.PretrainingSampler(len(remote), 0, 8, 0, 1)
    loader = torch_data.loader(remote, sampler, num_workers=2)
    assert loader.multiprocessing_context.get_start_method() == "spawn"
    expected = mdc.samplers.PretrainingSampler(len(remote), 0, 8, 0, 1)
    for batch, indices in zip(loader, expected):
        want = local.__getitems__(indices)["tokens"]
        np.testing.assert_array_equal(batch["tokens"].numpy(), want)
