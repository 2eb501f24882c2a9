"""megadata_adapters.trainers.maxtext: MaxText 0.2.5's mmap_npy input served by megadata.

The tests that need MaxText skip without it (it needs Python >= 3.12: the maxtext leg of
tools/test.sh runs them in its own venv). With it: MaxText's own ``get_mmap_npy_dataset``
and megadata's give the same samples value for value (single corpus, whole and separated
epochs, ``mmap_npy_split`` parts, a blend, host sharding); MaxText's
``create_data_iterator`` gives the same batches with and without the hook; the launcher
trains a tiny model on the CPU reading megadata's samples.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

import megadata_core as mdc
from megadata_adapters.trainers import data_json as mx_data_json
from megadata_adapters.trainers import maxtext as mx
from megadata_adapters.trainers.maxtext import source as samples

try:
    HAVE_MAXTEXT = importlib.util.find_spec("maxtext.input_pipeline") is not None
except (ImportError, ValueError):
    HAVE_MAXTEXT = False
needs_maxtext = pytest.mark.skipif(
    not HAVE_MAXTEXT, reason="maxtext is not installed (pip install 'maxtext[tpu]==0.2.5', "
    "Python >= 3.12: the maxtext leg of tools/test.sh)"
)
EOD = 1


def _write(prefix: str, documents: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
        for _ in range(documents):
            n = int(rng.integers(5, 120))
            writer.add_item(np.append(rng.integers(2, 1000, n), EOD).astype(np.uint16))
            writer.end_document()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("maxtext-corpus")
    _write(str(root / "a"), 900, 0)
    _write(str(root / "b"), 300, 1)
    return root


@pytest.fixture(scope="module")
def grain_data_processing():
    mx.install()
    from maxtext.input_pipeline import grain_data_processing as module

    return module


def _samples(module, function, pattern, **overrides):
    args = dict(
        split_sentences=False, seq_length=64, eod_id=EOD, num_epoch=1, host_index=0,
        host_count=1, num_threads=1, prefetch_buffer_size=1, blend_cache_dir=None,
        blend_index_dir=None, blend_split="train",
        apply_transforms=module._apply_mapdataset_transforms,
    )
    args.update(overrides)
    return [element["text"] for element in function(pattern, **args)]


CASES = {
    "one epoch": ("{d}|{c}/a", {}),
    "num_epoch 2": ("{d}|{c}/a", {"num_epoch": 2, "seed": 9}),
    "separated last epoch": ("{d}|{c}/a", {"num_samples": 1500, "seed": 3}),
    "three epochs": ("{d}|{c}/b", {"num_samples": 900, "seed": 5}),
    "split part 0": ("{d}|{c}/a", {"num_samples": 300, "split": "90,10", "split_index": 0}),
    "split part 1": ("{d}|{c}/a", {"num_samples": 30, "split": "90,10", "split_index": 1}),
    "blend": ("{d}/a|{c}/a,0.7;{d}/b|{c}/b,0.3", {"num_samples": 1200, "seed": 4}),
    "blend host 1 of 2": ("{d}/a|{c}/a,2;{d}/b|{c}/b,1", {"num_samples": 1000,
                                                          "host_index": 1, "host_count": 2}),
    "blend of one": ("{d}/a|{c}/a,1;{d}/b|{c}/b,0", {"num_samples": 200}),
}


@needs_maxtext
@pytest.mark.parametrize("case", CASES)
def test_samples_value_for_value(case, corpus, grain_data_processing, tmp_path):
    """MaxText's own mmap_npy samples (its .npy indices) == megadata's (its cache)."""
    module = grain_data_processing
    assert module.get_mmap_npy_dataset is mx.get_mmap_npy_dataset
    theirs_fn = module.maxtext_get_mmap_npy_dataset
    assert theirs_fn is not mx.get_mmap_npy_dataset
    pattern, overrides = CASES[case]
    theirs = _samples(module, theirs_fn, pattern.format(d=tmp_path / "mt", c=corpus), **overrides)
    ours = _samples(module, mx.get_mmap_npy_dataset, pattern.format(d=tmp_path / "md", c=corpus),
                    **overrides)
    assert len(ours) == len(theirs) > 0
    for index, (a, b) in enumerate(zip(theirs, ours)):
        assert a.dtype == b.dtype == np.int32 and a.shape == b.shape == (65,), index
        np.testing.assert_array_equal(a, b, err_msg=f"sample {index}")
    # megadata's cache is in the index directory; MaxText's own .npy files are not made
    ours_written = [n for _, _, names in os.walk(tmp_path / "md") for n in names]
    theirs_written = [n for _, _, names in os.walk(tmp_path / "mt") for n in names]
    assert any(n.endswith("-description.json") for n in ours_written), ours_written
    assert not any(n.endswith("-metadata.json") for n in ours_written), ours_written
    assert any(n.endswith("-metadata.json") for n in theirs_written), theirs_written


def _write_sentences(prefix: str, documents: int, seed: int) -> None:
    """A --split-sentences corpus: 1 to 3 sentences per document, the last ending in EOD."""
    rng = np.random.default_rng(seed)
    with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
        for _ in range(documents):
            sentences = int(rng.integers(1, 4))
            for k in range(sentences):
                tokens = rng.integers(2, 1000, int(rng.integers(3, 40)))
                if k == sentences - 1:
                    tokens = np.append(tokens, EOD)
                writer.add_item(tokens.astype(np.uint16))
            writer.end_document()


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """A directory of two .idx shards, and a --split-sentences corpus."""
    root = tmp_path_factory.mktemp("maxtext-shards")
    os.makedirs(root / "dir")
    _write(str(root / "dir" / "part-0"), 200, 7)
    _write(str(root / "dir" / "part-1"), 150, 8)
    _write_sentences(str(root / "sentences"), 300, 9)
    return root


MMAP_CASES = {
    "one corpus": ("{c}/a", {}),
    "shuffled, 2 epochs": ("{c}/a", {"shuffle": True, "shuffle_seed": 3, "num_epoch": 2}),
    "host 1 of 2": ("{c}/b", {"host_index": 1, "host_count": 2}),
    "shards": ("{s}/dir", {}),
    "split sentences": ("{s}/sentences", {"split_sentences": True}),
    "blend": ("{c}/a,0.7;{c}/b,0.3", {"shuffle": True, "shuffle_seed": 5}),
}


@needs_maxtext
@pytest.mark.parametrize("case", MMAP_CASES)
def test_mmap_documents_value_for_value(case, corpus, shards, grain_data_processing,
                                        monkeypatch):
    """grain_file_type: mmap: MaxText's own windows over megadata's documents == over its own
    documents (same documents, same order, MaxText's shuffle, repeat and host sharding)."""
    from maxtext.input_pipeline import _mmap_datasource as datasource

    assert datasource.create_mmap_source is mx.create_mmap_source
    pattern, overrides = MMAP_CASES[case]
    pattern = pattern.format(c=corpus, s=shards)
    args = dict(
        split_sentences=False, seq_length=64, eod_id=EOD, shuffle=False, shuffle_seed=0,
        num_epoch=1, host_index=0, host_count=1, num_threads=1, prefetch_buffer_size=1,
        apply_transforms=grain_data_processing._apply_mapdataset_transforms,
    )
    args.update(overrides)
    ours = [e["text"] for e in datasource.get_mmap_dataset(pattern, **args)]
    monkeypatch.setattr(datasource, "create_mmap_source", datasource.maxtext_create_mmap_source)
    theirs = [e["text"] for e in datasource.get_mmap_dataset(pattern, **args)]
    assert len(ours) == len(theirs) > 0
    for index, (a, b) in enumerate(zip(theirs, ours)):
        assert a.dtype == b.dtype and a.shape == b.shape == (64,), index
        np.testing.assert_array_equal(a, b, err_msg=f"window {index}")


@needs_maxtext
def test_mmap_document_source_is_maxtexts(corpus, shards):
    """Document by document, with MaxText's token counts, and picklable for Grain workers."""
    import pickle

    from maxtext.input_pipeline import _mmap_datasource as datasource

    for prefixes, split in (([f"{corpus}/a"], False),
                            ([f"{shards}/dir/part-0", f"{shards}/dir/part-1"], False),
                            ([f"{shards}/sentences"], True)):
        theirs = datasource.MultiShardMMapIndexedDataSource(prefixes, split_sentences=split)
        ours = pickle.loads(pickle.dumps(mx.MegadataDocumentSource(prefixes,
                                                                   split_sentences=split)))
        assert len(ours) == len(theirs)
        np.testing.assert_array_equal(ours.doc_token_counts(), theirs.doc_token_counts())
        for i in [*range(len(ours)), -1]:
            a, b = theirs[i]["text"], ours[i]["text"]
            assert a.dtype == b.dtype, i
            np.testing.assert_array_equal(a, b, err_msg=f"document {i}")
        with pytest.raises(IndexError):
            ours[len(ours)]


def _maxtext_config(corpus, index_dir, **extra):
    from maxtext.configs import pyconfig

    base = os.path.join(os.path.dirname(importlib.util.find_spec("maxtext").origin), "configs",
                        "base.yml")
    settings = dict(
        run_name="megadata-test", hardware="cpu", skip_jax_distributed_system=True,
        base_emb_dim=64, base_num_query_heads=2, base_num_kv_heads=2, base_mlp_dim=128,
        head_dim=32, base_num_decoder_layers=2, vocab_size=1024, max_target_length=64,
        per_device_batch_size=4, steps=10, enable_checkpointing=False, dataset_type="grain",
        grain_file_type="mmap_npy", grain_train_files=f"{index_dir}|{corpus}/a",
        mmap_eod_id=EOD, grain_worker_count=0, eval_interval=-1,
    )
    settings.update(extra)
    return pyconfig.initialize([sys.argv[0], base] + [f"{k}={v}" for k, v in settings.items()])


@needs_maxtext
@pytest.mark.parametrize("extra", [
    {},
    {"reset_attention_mask": False, "eod_mask_loss": True, "data_shuffle_seed": 17},
    {"grain_file_type": "mmap", "grain_train_files": "{c}/a"},
    {"grain_file_type": "mmap", "grain_train_files": "{c}/a", "eod_mask_loss": True,
     "enable_data_shuffling": True},
], ids=["defaults", "no-reset-eod-mask", "mmap", "mmap-shuffled-eod-mask"])
def test_create_data_iterator_same_batches(extra, corpus, grain_data_processing, tmp_path,
                                           monkeypatch):
    """MaxText's create_data_iterator (make_grain_train_iterator inside): the same batches
    under MaxText's keys with the hook as without it, mmap_npy and mmap."""
    from maxtext.input_pipeline import _mmap_datasource as datasource
    from maxtext.input_pipeline.input_pipeline_interface import create_data_iterator
    from maxtext.utils import maxtext_utils

    module = grain_data_processing
    extra = {k: v.format(c=corpus) if isinstance(v, str) else v for k, v in extra.items()}

    def batches(index_dir, use_megadata):
        config = _maxtext_config(corpus, index_dir, **extra)
        mesh = maxtext_utils.get_mesh_from_config(config)
        with monkeypatch.context() as patch:
            if not use_megadata:
                patch.setattr(module, "get_mmap_npy_dataset", module.maxtext_get_mmap_npy_dataset)
                patch.setattr(datasource, "create_mmap_source",
                              datasource.maxtext_create_mmap_source)
            iterator, _ = create_data_iterator(config, mesh)
            return [{k: np.asarray(v) for k, v in next(iterator).items()} for _ in range(6)]

    theirs = batches(tmp_path / "mt", use_megadata=False)
    ours = batches(tmp_path / "md", use_megadata=True)
    for step, (a, b) in enumerate(zip(theirs, ours)):
        assert sorted(a) == sorted(b), step
        for key in ("inputs", "targets", "inputs_segmentation", "targets_segmentation",
                    "inputs_position", "targets_position"):
            assert key in a, key
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"batch {step} {key}")
    import jax

    # per_device_batch_size 4 on every device of this process (8 with tools/test.sh's
    # XLA_FLAGS, 1 without)
    assert theirs[0]["inputs"].shape == (4 * jax.device_count(), 64)


def _data_json(path, corpus, cache, **fields) -> str:
    """A megadata data config file: corpus/a, all of it for training, and ``fields``."""
    values = {"blend": [[f"{corpus}/a"], None], "split": "1,0,0", "path_to_cache": str(cache)}
    values.update(fields)
    path.write_text(json.dumps(values))
    return str(path)


@needs_maxtext
@pytest.mark.parametrize("fields", [
    {"packing": "best_fit", "document_masking": True},
    {"packing": "best_fit", "document_masking": True, "packing_alignment": 4,
     "source_ids": True},
    {"blend": "a,b"},  # replaced below: a blend of the two corpora
    {"blend_schedule": "a then b"},  # replaced below: a schedule from one blend to another
], ids=["best_fit", "thd-source-ids", "blend", "blend-schedule"])
def test_data_config_gives_megadatas_samples_under_maxtexts_keys(
    fields, corpus, grain_data_processing, tmp_path
):
    """grain_train_files naming a megadata data config: MaxText's create_data_iterator
    yields megadata's own samples (best_fit bins with segment keys, THD keys, source ids,
    blends), split by megadata, passed through MaxText's MegatronSplitInputsTargets
    unchanged; no label that crosses documents is trained."""
    from maxtext.input_pipeline.input_pipeline_interface import create_data_iterator
    from maxtext.utils import maxtext_utils

    from megadata_adapters.trainers.maxtext.keys import to_maxtext

    if fields.get("blend") == "a,b":
        fields = {"blend": [[f"{corpus}/a", f"{corpus}/b"], [0.7, 0.3]]}
    if fields.get("blend_schedule") == "a then b":
        fields = {"blend": None, "blend_schedule":
                  f"0: 0.9 {corpus}/a 0.1 {corpus}/b; 3200: 0.2 {corpus}/a 0.8 {corpus}/b"}
    path = _data_json(tmp_path / "data.json", corpus, tmp_path / "cache", **fields)
    config = _maxtext_config(corpus, tmp_path, grain_train_files=path)
    mesh = maxtext_utils.get_mesh_from_config(config)
    iterator, _ = create_data_iterator(config, mesh)
    batches = [{k: np.asarray(v) for k, v in next(iterator).items()} for _ in range(3)]
    # the same config built here: the file's fields, MaxText's length, seed and EOD
    fields = {key: mx_data_json._tuples(value) for key, value in
              json.loads((tmp_path / "data.json").read_text()).items()}
    ours = mdc.build_datasets(
        mdc.GPTDataConfig(**fields, sequence_length=64, random_seed=config.data_shuffle_seed,
                          eod_id=EOD, create_attention_mask=False),
        [config.steps * config.global_batch_size_to_load, 0, 0],
    )[0]
    size = config.global_batch_size_to_load
    for step, batch in enumerate(batches):
        expected = to_maxtext(ours.__getitems__(np.arange(step * size, (step + 1) * size)))
        for key in ("inputs", "targets", "inputs_segmentation", "targets_segmentation",
                    "inputs_position", "targets_position"):
            np.testing.assert_array_equal(batch[key], expected[key], err_msg=f"{step} {key}")
        if fields.get("source_ids"):
            np.testing.assert_array_equal(batch["document_ids"], expected["document_ids"])
        if fields.get("document_masking"):
            segments = batch["inputs_segmentation"]
            # target t is input t + 1: another document's (or padding) -> not trained
            crossing = segments[:, :-1] != segments[:, 1:]
            assert not np.any(batch["targets_segmentation"][:, :-1][crossing])
            assert np.any(crossing)  # the bins hold several documents



@needs_maxtext
def test_conversation_loss_mask_is_maxtexts_targets_segmentation(grain_data_processing, tmp_path):
    """A conversation corpus blended with a plain one (the JSON data config, with a
    train_on_* switch): MaxText's create_data_iterator weights exactly the labels that
    megadata's loss mask trains (targets_segmentation 0 elsewhere), which are the labels
    of the trained roles read off the roles directly."""
    from conversation_corpora import Corpora, trained_roles
    from maxtext.input_pipeline.input_pipeline_interface import create_data_iterator
    from maxtext.utils import maxtext_utils

    (tmp_path / "corpora").mkdir()
    corpora = Corpora(str(tmp_path / "corpora"))
    path = corpora.write_json(str(tmp_path / "data.json"), train_on_thinking_traces=True,
                              path_to_cache=str(tmp_path / "cache"))
    config = _maxtext_config(tmp_path, tmp_path, grain_train_files=path, vocab_size=32768)
    mesh = maxtext_utils.get_mesh_from_config(config)
    iterator, _ = create_data_iterator(config, mesh)
    batches = [{k: np.asarray(v) for k, v in next(iterator).items()} for _ in range(2)]
    fields = {key: mx_data_json._tuples(value) for key, value in
              json.loads((tmp_path / "data.json").read_text()).items()}
    ours = mdc.build_datasets(
        mdc.GPTDataConfig(**fields, sequence_length=64, random_seed=config.data_shuffle_seed,
                          eod_id=EOD, create_attention_mask=False),
        [config.steps * config.global_batch_size_to_load, 0, 0],
    )[0]
    size = config.global_batch_size_to_load
    roles = trained_roles(thinking=True)
    for step, batch in enumerate(batches):
        core = ours.__getitems__(np.arange(step * size, (step + 1) * size))
        np.testing.assert_array_equal(batch["inputs"], core["tokens"])
        trained = batch["targets_segmentation"] != 0
        np.testing.assert_array_equal(trained, core["loss_mask"] != 0)
        np.testing.assert_array_equal(
            trained, corpora.expected_mask(batch["inputs"], batch["targets"], roles))
        chat = corpora.chat_rows(batch["inputs"])
        assert chat.any() and not trained[chat].all()

@needs_maxtext
def test_launcher_trains_on_a_data_config(corpus, tmp_path):
    """A best_fit data config with source ids, through the launcher: MaxText trains."""
    path = _data_json(tmp_path / "data.json", corpus, tmp_path / "cache", packing="best_fit",
                      document_masking=True, source_ids=True)
    args = _train_args(corpus, tmp_path / "unused", tmp_path / "out", "steps=3",
                       "enable_checkpointing=False", f"grain_train_files={path}")
    done = subprocess.run(LAUNCH + args, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "megadata serves MaxText its own samples" in output
    losses = STEP_LOSS.findall(output)
    assert [step for step, _ in losses] == ["0", "1", "2"]
    assert all(np.isfinite(float(loss)) for _, loss in losses)


@needs_maxtext
@pytest.mark.parametrize("source", ["mmap_npy", "data config"])
@pytest.mark.parametrize("new_count", [1, 3, 4])
def test_iterator_state_of_2_hosts_resumes_on_another_count(
    source, new_count, corpus, grain_data_processing, tmp_path
):
    """Two hosts' iterators (MaxText's own pipeline over megadata's source) stop after 6
    samples each; their states, resharded, resume new_count hosts exactly at global sample
    12: every host's next samples are the global order's from there."""
    if source == "mmap_npy":
        pattern = f"{tmp_path / 'index'}|{corpus}/a"
    else:
        pattern = _data_json(tmp_path / "data.json", corpus, tmp_path / "cache",
                             packing="best_fit", document_masking=True)

    def iterator(host_index, host_count):
        dataset = mx.get_mmap_npy_dataset(
            pattern, False, 64, EOD, 1, host_index, host_count, 2, 4, None, None, "train",
            grain_data_processing._apply_mapdataset_transforms, num_samples=120, seed=5,
        )
        return iter(dataset)

    def tokens(element):
        return element["text"] if "text" in element else element["inputs"]

    whole = [tokens(e) for e in iterator(0, 1)]  # the global order, one host
    states = []
    for host in range(2):
        it = iterator(host, 2)
        for _ in range(6):
            next(it)
        states.append(it.get_state())
    assert states == [{"next_index": 6}] * 2
    for host, state in enumerate(mx.reshard_states(states, new_count)):
        it = iterator(host, new_count)
        it.set_state(state)
        position = 12 // new_count
        for j in range(position, position + 5):
            global_index = host + j * new_count
            np.testing.assert_array_equal(tokens(next(it)), whole[global_index],
                                          err_msg=f"host {host}, sample {global_index}")


@needs_maxtext
def test_install_is_idempotent(grain_data_processing):
    from maxtext.input_pipeline import _mmap_datasource

    mx.install()
    mx.install()
    assert mx.installed()
    assert sum(getattr(f, "_megadata_maxtext", False) for f in sys.meta_path) == 1
    assert grain_data_processing.get_mmap_npy_dataset is mx.get_mmap_npy_dataset
    assert _mmap_datasource.get_mmap_npy_dataset is mx.get_mmap_npy_dataset
    own = grain_data_processing.maxtext_get_mmap_npy_dataset
    assert own.__module__ == "maxtext.input_pipeline._mmap_datasource"
    assert _mmap_datasource.maxtext_get_mmap_npy_dataset is own
    assert _mmap_datasource.create_mmap_source is mx.create_mmap_source
    assert _mmap_datasource.maxtext_create_mmap_source.__module__ == _mmap_datasource.__name__


@needs_maxtext
@pytest.mark.parametrize("pattern, overrides, message", [
    ("{d}|{c}/a:{c}/b", {}, "names 2 shards"),
    ("{d}|{c}", {}, "directory of 2 .idx shards"),
    ("{c}/a", {}, "must be 'index_dir|prefix'"),
    ("{d}|{c}/missing", {}, "no "),
    ("{d}|{c}/a", {"split_sentences": True}, "mmap_split_sentences"),
    ("{d}|{c}/a", {"blend_index_dir": "/x"}, "blend_index_dir"),
    ("{d}/a|{c}/a,1;{d}/b|{c}/b,1", {}, "steps"),
    ("{d}/a|{c}/a,0;{d}/b|{c}/b,0", {"num_samples": 10}, "all 0"),
])
def test_unsupported_settings_are_named(pattern, overrides, message, corpus,
                                        grain_data_processing, tmp_path):
    with pytest.raises(mdc.DataError, match=re.escape(message)):
        _samples(grain_data_processing, mx.get_mmap_npy_dataset,
                 pattern.format(d=tmp_path, c=corpus), **overrides)


@needs_maxtext
def test_grain_workers_unpickle_the_source(corpus, grain_data_processing, tmp_path):
    import pickle

    import grain.python as grain

    pattern = f"{tmp_path}/a|{corpus}/a,0.6;{tmp_path}/b|{corpus}/b,0.4"
    dataset = mx.get_mmap_npy_dataset(
        pattern, False, 64, EOD, 1, 0, 1, 1, 1, None, None, "train",
        grain_data_processing._apply_mapdataset_transforms, num_samples=100,
    )
    assert sum(1 for _ in dataset) == 100
    spec = [(str(tmp_path / "a"), f"{corpus}/a", 10)]
    source = mx.MegadataNpySource(samples.MmapNpyPlan(
        spec, None, None, seq_length=64, eod_id=EOD, seed=1, split=None, split_index=0,
        num_epoch=1, path_to_cache=str(tmp_path / "a"),
    ))
    copy = pickle.loads(pickle.dumps(source))
    assert type(copy) is mx.MegadataNpySource and len(copy) == len(source)
    for index in (0, len(source) - 1):
        np.testing.assert_array_equal(copy[index]["text"], source[index]["text"])
    assert isinstance(grain.MapDataset.source(copy)[0]["text"], np.ndarray)


LAUNCH = [sys.executable, "-m", "megadata_adapters.trainers.maxtext"]


def _train_args(corpus, index_dir, out_dir, *settings: str) -> list[str]:
    """MaxText's train module, base.yml and a tiny model on the CPU over ``corpus``/a."""
    base = os.path.join(os.path.dirname(importlib.util.find_spec("maxtext").origin), "configs",
                        "base.yml")
    return [
        "maxtext.trainers.pre_train.train", base, "run_name=t",
        f"base_output_directory={out_dir}", "hardware=cpu",
        "skip_jax_distributed_system=True", "base_emb_dim=64", "base_num_query_heads=2",
        "base_num_kv_heads=2", "base_mlp_dim=128", "head_dim=32",
        "base_num_decoder_layers=2", "vocab_size=1024", "max_target_length=64",
        "per_device_batch_size=4", "dataset_type=grain", "grain_file_type=mmap_npy",
        f"grain_train_files={index_dir}|{corpus}/a", f"mmap_eod_id={EOD}",
        "grain_worker_count=0", "log_period=1", "eval_interval=-1",
        "enable_tensorboard=False", *settings,
    ]


STEP_LOSS = re.compile(r"completed step: (\d+),.*? loss: ([0-9.]+)")


@needs_maxtext
def test_launcher_trains_on_megadata(corpus, tmp_path):
    """The launcher in front of MaxText's train module: a tiny model trains a few steps on
    the CPU, reading megadata's samples (and MaxText's own run gives the same losses)."""

    def train(index_dir, launcher):
        args = _train_args(corpus, index_dir, tmp_path / "out", "steps=3",
                           "enable_checkpointing=False")
        command = (LAUNCH if launcher else [sys.executable, "-m"]) + args
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        output = done.stdout + done.stderr
        assert done.returncode == 0, output[-4000:]
        return output, STEP_LOSS.findall(output)

    ours, our_losses = train(tmp_path / "md", launcher=True)
    assert "megadata serves MaxText's mmap_npy samples" in ours
    assert [step for step, _ in our_losses] == ["0", "1", "2"]
    assert not any(n.endswith("-metadata.json") for n in os.listdir(tmp_path / "md"))
    shutil.rmtree(tmp_path / "out", ignore_errors=True)
    theirs, their_losses = train(tmp_path / "mt", launcher=False)
    assert "megadata serves" not in theirs
    assert our_losses == their_losses


TRACE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "maxtext_batch_trace.py")


def _traced_run(corpus, tmp_path, out: str, trace: str, kill_after: int | None = None):
    """20 steps with MaxText's checkpointing (every 5 steps, synchronous), batches traced;
    with ``kill_after``, SIGKILLed once that step is logged. (steps and losses logged,
    batch digests)."""
    args = _train_args(
        corpus, tmp_path / "index", tmp_path / out, "steps=20", "enable_checkpointing=True",
        "async_checkpointing=False", "checkpoint_period=5",
    )
    process = subprocess.Popen(
        [sys.executable, TRACE, str(tmp_path / trace), *args], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            found = STEP_LOSS.search(line)
            if kill_after is not None and found and int(found[1]) >= kill_after:
                os.killpg(process.pid, signal.SIGKILL)
                break
        process.wait(timeout=600)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    output = "".join(lines)
    if kill_after is None:
        assert process.returncode == 0, output[-4000:]
    else:
        assert process.returncode == -signal.SIGKILL, output[-4000:]
    steps = [(int(step), loss) for step, loss in STEP_LOSS.findall(output)]
    return steps, (tmp_path / trace).read_text().split()


@needs_maxtext
def test_killed_after_step_10_resumes_with_the_same_batches(corpus, tmp_path):
    """MaxText checkpoints its Grain iterator over megadata's source: a run killed after
    step 10 and started again (MaxText resumes from its step-10 checkpoint) trains steps
    11 to 19 on the batches, and with the losses, of a run never killed."""
    whole, whole_batches = _traced_run(corpus, tmp_path, "whole", "whole.trace")
    assert [step for step, _ in whole] == list(range(20)) and len(whole_batches) == 20
    killed, _ = _traced_run(corpus, tmp_path, "killed", "killed.trace", kill_after=11)
    assert killed == whole[: len(killed)]
    resumed, resumed_batches = _traced_run(corpus, tmp_path, "killed", "resumed.trace")
    first = resumed[0][0]
    assert first == 11, f"resumed at step {first}, not after the step-10 checkpoint"
    assert resumed == whole[first:]
    assert resumed_batches == whole_batches[first:]


def test_launcher_usage():
    done = subprocess.run(LAUNCH, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "usage:" in done.stderr
    done = subprocess.run(LAUNCH + ["--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "usage:" in done.stdout


@pytest.mark.skipif(HAVE_MAXTEXT, reason="maxtext is installed")
def test_without_maxtext_one_line_error():
    with pytest.raises(mx.MaxTextImportError, match="maxtext is not installed") as caught:
        mx.install()
    assert isinstance(caught.value, mdc.DataError) and isinstance(caught.value, ImportError)
    assert not mx.installed()
    done = subprocess.run(LAUNCH + ["maxtext.trainers.pre_train.train"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0 and "maxtext is not installed" in done.stderr


@needs_maxtext
def test_docs_maxtext_blocks_run_as_written(tmp_path):
    """docs/trainers.md's MaxText section runs as written (docs_sections.run_section)."""
    from docs_sections import run_section

    outputs = run_section("MaxText", tmp_path)
    assert len(outputs) == 5  # the corpus, the launcher, install(), a data config, its run
    assert "megadata serves MaxText's mmap_npy samples" in outputs[1]
    assert re.search(r"completed step: 2,", outputs[1]), outputs[1][-4000:]
    assert any(name.endswith("-description.json") for name in os.listdir(tmp_path / "index"))
    assert "megadata serves MaxText its own samples" in outputs[4]
    assert re.search(r"completed step: 2,", outputs[4]), outputs[4][-4000:]
