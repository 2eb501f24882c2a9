"""Raw shards as a blend member: the corpus the background tokenizer makes equals
megadata-preprocess's, and the samples are a pure function of the config, the seed and
the shards (workers, DP ranks, tokenizer speed, kills and resumes change nothing)."""

from __future__ import annotations

import filecmp
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from raw_shards_helpers import batches, slow_factory, write_shards

import megadata_core as mdc
from megadata_core.datasets import raw_member
from megadata_core.preprocess import ByteTokenizer, preprocess_jsonl
from megadata_core.preprocess import stream as raw_stream

HELPERS = os.path.join(os.path.dirname(__file__), "..", "helpers")


def build(shards, cache, *, tokenizer=ByteTokenizer, sizes=(200, None, None), split="100,0,0",
          window=2, piece_size=4096, workers=None, first_window=1, **options):
    raw = mdc.RawShards(shards, tokenizer, window=window, piece_size=piece_size,
                        workers=workers, first_window=first_window)
    config = mdc.GPTDataConfig(random_seed=options.pop("seed", 5), sequence_length=32,
                               blend=([raw], None), split=split, path_to_cache=str(cache),
                               eod_id=256, **options)
    return mdc.build_datasets(config, list(sizes))


@pytest.fixture(autouse=True)
def _fresh_corpora():
    """Each test opens its corpora anew (a process keeps one per cache directory)."""
    yield
    raw_member.stop_raw_corpora()


def finish(dataset, timeout: float = 60.0) -> None:
    """Wait until the dataset's corpus is complete (the background tokenizer ends)."""
    corpus = dataset.corpus
    ends = time.monotonic() + timeout
    while not corpus.complete():
        if time.monotonic() > ends:
            raise AssertionError(f"{corpus} not complete after {timeout} s")
        corpus._raise_error()
        corpus.start()
        time.sleep(0.02)


def same(first: list[dict], second: list[dict]) -> bool:
    return len(first) == len(second) and all(
        a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
        for a, b in zip(first, second))


def test_the_streamed_corpus_is_megadata_preprocess_of_each_shard(tmp_path):
    shards = write_shards(tmp_path, gz=(1,))
    train = build(shards, tmp_path / "cache")[0]
    finish(train)
    corpus = train.corpus
    for k, path in enumerate(shards):
        reference = str(tmp_path / f"reference{k}")
        preprocess_jsonl([path], reference, ByteTokenizer, append_eod=True)
        for suffix in (".bin", ".idx"):
            assert filecmp.cmp(f"{reference}_text_document{suffix}",
                               corpus.shard_prefix(k) + suffix, shallow=False)
    assert os.listdir(os.path.join(corpus.directory, "pieces")) == []
    listed = json.loads(open(os.path.join(corpus.directory, "corpus.json")).read())
    assert listed["prefixes"] == [corpus.shard_prefix(k) for k in range(len(shards))]
    lines = open(os.path.join(corpus.directory, "corpus.data_args")).read().split()
    assert lines[1::2] == listed["prefixes"]


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_the_same_samples_for_any_worker_count_and_tokenizer_speed(tmp_path, workers):
    shards = write_shards(tmp_path)
    reference = batches(build(shards, tmp_path / "fast")[0], 12, size=8)
    slow = build(shards, tmp_path / f"slow{workers}", tokenizer=slow_factory(0.0002, 0.0005),
                 workers=workers)[0]
    assert same(batches(slow, 12, size=8), reference)


def test_a_later_run_reads_the_finished_corpus_without_tokenizing(tmp_path):
    shards = write_shards(tmp_path)
    first = build(shards, tmp_path / "cache")[0]
    expected = batches(first, 10, size=8)
    finish(first)
    raw_member.stop_raw_corpora()

    def refuse():
        raise AssertionError("tokenized again")

    again = build(shards, tmp_path / "cache", tokenizer=ByteTokenizer)[0]
    again.corpus.tokenizer_factory = refuse
    assert same(batches(again, 10, size=8), expected)
    assert not again.corpus._producing()


@pytest.mark.parametrize("data_parallel_size", [1, 2])
def test_ranks_and_resume_serve_the_order_of_one_rank(tmp_path, data_parallel_size):
    shards = write_shards(tmp_path)
    train = build(shards, tmp_path / "cache", sizes=(160, None, None))[0]
    whole = train.__getitems__(np.arange(160))["tokens"]
    for consumed in (0, 48):
        for rank in range(data_parallel_size):
            sampler = mdc.samplers.PretrainingSampler(
                160, consumed, 4, rank, data_parallel_size)
            for step, indices in enumerate(sampler):
                tokens = train.__getitems__(indices)["tokens"]
                assert np.array_equal(tokens, whole[indices])
                if step == 3:
                    break


def test_a_killed_run_resumes_with_the_same_batches(tmp_path):
    shards = write_shards(tmp_path, counts=(400, 400, 400))
    cache = tmp_path / "cache"
    child, printed = start_child(cache, shards)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    directory = next((cache / "raw").iterdir())
    assert not (directory / "corpus.json").exists()  # killed while it was making pieces
    raw = mdc.RawShards(shards, ByteTokenizer, window=2, piece_size=4096)
    config = mdc.GPTDataConfig(random_seed=7, sequence_length=32, blend=([raw], None),
                               split="100,0,0", path_to_cache=str(cache), eod_id=256)
    resumed = mdc.build_datasets(config, [400, None, None])[0]
    assert [str(int(b["tokens"].sum())) for b in batches(resumed, 3)] == printed[:-1]
    later = batches(resumed, 20, start=12)
    finish(resumed)
    raw_member.stop_raw_corpora()
    fresh = mdc.build_datasets(config.with_random_seed(7), [400, None, None])[0]
    assert same(batches(fresh, 20, start=12), later)
    leftovers = [name for name in os.listdir(directory / "pieces")]
    leftovers += [n for n in os.listdir(directory / "shards") if not n.endswith(
        (".bin", ".idx", ".json"))]
    assert leftovers == []


def start_child(cache, shards, workers: int = 0) -> tuple[subprocess.Popen, list[str]]:
    """A trainer process reading three batches of a slow raw member (then producing)."""
    child = subprocess.Popen(
        [sys.executable, os.path.join(HELPERS, "raw_shards_helpers.py"), str(cache), "2",
         str(workers), *shards], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([HELPERS, *sys.path])})
    printed = []
    try:
        for line in child.stdout:  # type: ignore[union-attr]
            printed.append(line.strip())
            if line.strip() == "read":
                break
        assert printed and printed[-1] == "read", printed
    except BaseException:
        child.kill()
        raise
    return child, printed


def descendants(pid: int) -> set[int]:
    """The processes below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stream:
                    parent = int(stream.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stream:
            return stream.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL"])
@pytest.mark.parametrize("workers", [0, 2])
def test_an_interrupted_trainer_leaves_no_process_or_partial_file(tmp_path, how, workers):
    shards = write_shards(tmp_path, counts=(400, 400))
    cache = tmp_path / "cache"
    child, _ = start_child(cache, shards, workers)
    below = descendants(child.pid)
    assert len(below) >= workers  # the spawned tokenizer processes
    child.send_signal(getattr(signal, how))
    assert child.wait(timeout=10) != 0
    ends = time.monotonic() + 10
    while any(alive(pid) for pid in below) and time.monotonic() < ends:
        time.sleep(0.05)
    assert not [pid for pid in below if alive(pid)]
    directory = next((cache / "raw").iterdir())
    pieces = sorted(os.listdir(directory / "pieces"))
    if how == "SIGINT":  # the producer stopped between blocks: only finished pieces
        finished = {name.split("_")[0].split(".")[0] for name in pieces if name.endswith(".json")}
        assert all(name.split("_")[0].split(".")[0] in finished for name in pieces), pieces
    # whatever a kill left is removed by the next producer, finished pieces kept
    raw = mdc.RawShards(shards, ByteTokenizer, window=2, piece_size=4096)
    config = mdc.GPTDataConfig(random_seed=7, sequence_length=32, blend=([raw], None),
                               split="100,0,0", path_to_cache=str(cache), eod_id=256)
    finish(mdc.build_datasets(config, [400, None, None])[0])
    assert os.listdir(directory / "pieces") == []


def test_a_bad_line_names_the_shard_and_line(tmp_path):
    shards = write_shards(tmp_path, counts=(50, 50))
    with open(shards[1], "ab") as stream:
        stream.write(b'{"text": "fine"}\n{"text": oops}\n')
    train = build(shards, tmp_path / "cache", window=8, first_window=8, piece_size=1 << 20)[0]
    with pytest.raises(mdc.DataError, match=r"shard1\.jsonl.*line 52"):
        train.__getitems__([0])


def test_a_changed_shard_is_refused_by_name(tmp_path):
    shards = write_shards(tmp_path)
    train = build(shards, tmp_path / "cache")[0]
    finish(train)
    raw_member.stop_raw_corpora()
    with open(shards[2], "ab") as stream:
        stream.write(b'{"text": "one more"}\n')
    with pytest.raises(mdc.DataError, match=r"shard2\.jsonl: raw shard changed"):
        build(shards, tmp_path / "cache")


def test_a_wait_prints_one_progress_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(raw_stream, "_WAIT_NOTE_SECONDS", 0.05)
    shards = write_shards(tmp_path, counts=(200,))
    train = build(shards, tmp_path / "cache", tokenizer=slow_factory(0.002), window=1,
                  piece_size=1 << 20)[0]
    train.__getitems__([0])
    lines = [line for line in capsys.readouterr().err.splitlines() if "waiting" in line]
    assert lines and "shard0.jsonl (piece 0)" in lines[0] and "tokens/s" in lines[0]


def test_raw_and_prefix_members_blend_with_packing_and_masks(tmp_path):
    shards = write_shards(tmp_path)
    prefix = str(tmp_path / "plain")
    preprocess_jsonl(shards[:1], prefix, ByteTokenizer, append_eod=True)
    raw = {"raw": shards, "tokenizer": ByteTokenizer, "window": 2, "piece_size": 4096}
    for options in ({}, {"packing": "best_fit", "document_masking": True}):
        config = mdc.GPTDataConfig(
            random_seed=3, sequence_length=32, split="90,10,0", path_to_cache=str(tmp_path),
            eod_id=256, blend=([raw, f"{prefix}_text_document"], [0.6, 0.4]), **options)
        train, valid, _ = mdc.build_datasets(config, [120, 20, None])
        batch = train.__getitems__(np.arange(120))
        assert set(np.unique(batch["dataset_id"]).tolist()) == {0, 1}
        assert batch["tokens"].shape == (120, 32)
        if options:
            assert "segment_ids" in batch or "cu_seqlens" in batch
        assert valid.__getitems__(np.arange(20))["tokens"].shape == (20, 32)


def test_what_raw_members_refuse(tmp_path):
    shards = write_shards(tmp_path, counts=(20,))
    with pytest.raises(mdc.DataError, match="matches no file"):
        mdc.RawShards(str(tmp_path / "none*.jsonl"), ByteTokenizer)
    with pytest.raises(mdc.DataError, match="needs a 'type'"):
        mdc.RawShards(shards, {"path": "x"})
    with pytest.raises(mdc.DataError, match="window"):
        mdc.RawShards(shards, ByteTokenizer, window=0)
    with pytest.raises(mdc.DataError, match="not a raw shard"):
        mdc.RawShards([str(tmp_path / "x.txt")], ByteTokenizer)
    with pytest.raises(mdc.DataError, match="keys"):
        mdc.GPTDataConfig(random_seed=1, sequence_length=8, split="1,0,0",
                          blend=([{"raw": shards, "tokenizer": ByteTokenizer, "wndow": 2}], None))
    raw = mdc.RawShards(shards, ByteTokenizer)
    for options, message in (({"path_to_cache": None}, "path_to_cache"),):
        config = mdc.GPTDataConfig(**{"random_seed": 1, "sequence_length": 8,
                                      "split": "1,0,0", "blend": ([raw], None), "eod_id": 256,
                                      "path_to_cache": str(tmp_path), **options})
        with pytest.raises(mdc.DataError, match=message):
            mdc.build_datasets(config, [10, None, None])


@settings(max_examples=25, deadline=None)
@given(counts=st.lists(st.integers(0, 60), min_size=1, max_size=4),
       window=st.integers(1, 5), piece_size=st.sampled_from([256, 1024, 1 << 20]),
       seed=st.integers(0, 2**31 - 1))
def test_every_document_once_per_epoch_and_no_sample_twice(tmp_path_factory, counts, window,
                                                           piece_size, seed):
    directory = tmp_path_factory.mktemp("raw")
    shards = write_shards(directory, counts=[max(1, c) for c in counts], seed=seed % 1000)
    raw = mdc.RawShards(shards, ByteTokenizer, window=window, piece_size=piece_size)
    config = mdc.GPTDataConfig(random_seed=seed, sequence_length=16, blend=([raw], None),
                               split="100,0,0", path_to_cache=str(directory), eod_id=256)
    try:
        train = mdc.build_datasets(config, [None, None, None])[0]
    except mdc.DataError as error:  # an epoch too short for one sample
        assert "makes no sample" in str(error)
        return
    seen = []
    for window_number in range(train._first_epoch):
        dataset = train._window(window_number).dataset if (
            train._starts[window_number + 1] > train._starts[window_number]) else None
        pieces = train._window_pieces(window_number).tolist()
        seen.extend(pieces)
        if dataset is None:
            continue
        chain_length = len(dataset.indexed)
        document_index = np.asarray(dataset.document_index)
        assert sorted(document_index.tolist()) == list(range(chain_length))
        shuffle = np.asarray(dataset.shuffle_index)
        assert sorted(shuffle.tolist()) == list(range(len(dataset)))
    assert sorted(seen) == list(range(train.corpus.pieces))
    assert len(train) == train._starts[-1]
    raw_member.stop_raw_corpora()


def test_a_tokenizer_named_as_preprocessing_names_it_gives_megadata_preprocess_bytes(tmp_path):
    pytest.importorskip("tokenizers")
    from tokenizer_files import write_hf_directory

    tokenizer_json = os.path.join(write_hf_directory(str(tmp_path)), "tokenizer.json")
    shards = write_shards(tmp_path, counts=(150, 120), gz=(1,))
    raw = {"raw": str(tmp_path / "shard*.jsonl*"), "window": 2, "piece_size": 8192,
           "tokenizer": {"type": "huggingface", "path": tokenizer_json}}
    config = mdc.GPTDataConfig(random_seed=2, sequence_length=32, blend=([raw], None),
                               split="100,0,0", path_to_cache=str(tmp_path / "cache"),
                               eod_id=1)
    train = mdc.build_datasets(config, [50, None, None])[0]
    finish(train)
    for k, path in enumerate(shards):
        out = tmp_path / f"cli{k}"
        subprocess.run(
            [sys.executable, "-m", "megadata_cli.preprocess_data", "--input", path,
             "--output_prefix", str(out), "--tokenizer_type", "huggingface",
             "--tokenizer_file", tokenizer_json, "--append_eod"],
            check=True, capture_output=True, timeout=120)
        for suffix in (".bin", ".idx"):
            assert filecmp.cmp(f"{out}_text_document{suffix}",
                               train.corpus.shard_prefix(k) + suffix, shallow=False)


def test_megadata_inspect_shows_the_raw_corpus_and_its_shards(tmp_path):
    shards = write_shards(tmp_path)
    train = build(shards, tmp_path / "cache")[0]
    finish(train)

    def inspect(target: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "megadata_cli.inspect_data", "corpus", target,
             "--output_dir", str(tmp_path / "plots")],
            check=True, capture_output=True, text=True, timeout=120).stdout

    shown = inspect(train.corpus.directory)
    assert "3 (3 merged)" in shown and "pieces" in shown and "complete   yes" in shown
    expected = sum(int(mdc.IndexedDataset(train.corpus.shard_prefix(k)).sequence_lengths.sum())
                   for k in range(3))
    assert f"tokens     {expected:,} made" in shown
    assert "tokens" in inspect(train.corpus.shard_prefix(0))


def test_a_blend_schedule_reads_raw_members_in_its_stages(tmp_path):
    shards = write_shards(tmp_path)
    prefix = str(tmp_path / "plain")
    preprocess_jsonl(shards[:1], prefix, ByteTokenizer, append_eod=True)
    raw = {"raw": shards, "tokenizer": ByteTokenizer, "window": 2, "piece_size": 4096}
    plain = f"{prefix}_text_document"
    schedule = [(0, ([raw, plain], [0.9, 0.1])), (100, ([raw, plain], [0.1, 0.9]))]
    config = mdc.GPTDataConfig(random_seed=3, sequence_length=32, split="100,0,0",
                               path_to_cache=str(tmp_path), eod_id=256,
                               blend_schedule=schedule)
    train = mdc.build_datasets(config, [240, None, None])[0]
    members = train.__getitems__(np.arange(240))["dataset_id"]
    assert np.bincount(members[:100], minlength=2).tolist() == [90, 10]
    assert np.bincount(members[100:], minlength=2)[1] > 110
    raw_member.stop_raw_corpora()
    again = mdc.build_datasets(config, [240, None, None])[0]
    assert np.array_equal(again.__getitems__(np.arange(140, 240))["tokens"],
                          train.__getitems__(np.arange(140, 240))["tokens"])


def test_a_piece_merged_away_while_it_is_opened_is_read_from_its_shard(tmp_path, monkeypatch):
    """The race explore mode found: a reader opened a piece's own .idx, and the producer
    merged the piece into its shard and removed its .bin before the reader mapped it."""
    shards = write_shards(tmp_path, counts=(120, 60))
    train = build(shards, tmp_path / "cache", tokenizer=slow_factory(0.001), window=8,
                  first_window=8)[0]
    corpus = train.corpus

    def unmerged() -> int | None:
        return next((i for i in range(corpus.pieces)
                     if (found := corpus.locate(i)) is not None and found[2] is None), None)

    ends = time.monotonic() + 60
    while (piece := unmerged()) is None and time.monotonic() < ends:
        time.sleep(0.005)
    corpus.stop()  # a piece made, its shard not merged yet
    assert piece is not None and unmerged() is not None
    piece = unmerged()
    merged_meanwhile = []

    class MergedWhileOpened(mdc.IndexedDataset):
        def token_view(self):
            if self.path_prefix == corpus._piece_prefix(piece) and not merged_meanwhile:
                merged_meanwhile.append(True)
                finish(train)  # the producer merges the shard, the piece's files go
                return super().token_view()
            return super().token_view()

    monkeypatch.setattr(raw_stream, "IndexedDataset", MergedWhileOpened)
    opened, first, stop = corpus.open_piece(piece)
    assert merged_meanwhile
    assert (opened.path_prefix, first, stop) == corpus.locate(piece)


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_source_ids_name_each_token_s_piece_and_sequence(tmp_path, packing):
    shards = write_shards(tmp_path)
    prefix = str(tmp_path / "plain")
    preprocess_jsonl(shards[:1], prefix, ByteTokenizer, append_eod=True)
    raw = mdc.RawShards(shards, ByteTokenizer, window=2, piece_size=4096)
    config = mdc.GPTDataConfig(
        random_seed=6, sequence_length=32, split="100,0,0", path_to_cache=str(tmp_path),
        eod_id=256, source_ids=True, packing=packing,
        blend=([raw, f"{prefix}_text_document"], [0.7, 0.3]))
    train = mdc.build_datasets(config, [150, None, None])[0]
    batch = train.__getitems__(np.arange(150))
    raw_dataset = train.datasets[0]
    finish(raw_dataset)
    corpus = raw_dataset.corpus
    tokens, members, documents = batch["tokens"], batch["dataset_ids"], batch["document_ids"]
    assert documents.dtype == np.int64 and set(np.unique(members).tolist()) <= {-1, 0, 1}
    checked = 0
    for row in np.flatnonzero((members == 0).any(axis=1)):
        for document in np.unique(documents[row][members[row] == 0]).tolist():
            piece, sequence = document >> 32, document & 0xFFFFFFFF
            where, first, _ = corpus.locate(piece)
            text = mdc.IndexedDataset(where)[first + sequence].tolist()
            run = tokens[row][documents[row] == document].tolist()
            assert any(text[k:k + len(run)] == run for k in range(len(text) - len(run) + 1))
            checked += 1
    assert checked > 50
    again = mdc.build_datasets(config, [150, None, None])[0]  # a later run: the same ids
    assert np.array_equal(again.__getitems__(np.arange(150))["document_ids"], documents)
