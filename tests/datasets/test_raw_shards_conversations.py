"""Conversations streamed from raw shards with the real chat encoder: each piece's roles
beside its tokens, the merged shards and the finished corpus byte for byte what
``preprocess_jsonl`` writes, and samples whose loss mask trains exactly the labels whose
roles train (read against the merged shards' roles directly)."""

from __future__ import annotations

import filecmp
import functools
import json
import os
import time

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")
pytest.importorskip("transformers")

from chat_files import chat_factory, conversations, save_chat_tokenizer, write_rows  # noqa: E402
from raw_shards_helpers import batches  # noqa: E402

import megadata_core as mdc  # noqa: E402
from megadata_core.datasets import raw_member  # noqa: E402
from megadata_core.format.chain import CorpusChain  # noqa: E402
from megadata_core.format.roles import Role, has_roles, roles_prefix  # noqa: E402
from megadata_core.preprocess import preprocess_jsonl  # noqa: E402
from megadata_core.preprocess.raw_directory import directory_status  # noqa: E402

S = 32


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> str:
    return save_chat_tokenizer(str(tmp_path_factory.mktemp("tok")))


@pytest.fixture(autouse=True)
def _fresh_corpora():
    yield
    raw_member.stop_raw_corpora()


class SlowChat:
    """The chat encoder of ``factory``, ``delay`` seconds per conversation (a producer
    slow enough to be stopped between two pieces)."""

    def __init__(self, factory, delay: float) -> None:
        self.inner, self.delay = factory(), delay
        self.eod_id, self.vocab_size = self.inner.eod_id, self.inner.vocab_size

    def encode(self, text: str):
        return self.inner.encode(text)

    def encode_conversations(self, values, where):
        time.sleep(self.delay * len(values))
        return self.inner.encode_conversations(values, where)

    def __repr__(self) -> str:
        return f"SlowChat({self.inner!r})"


def chat_shards(directory, counts=(90, 60)) -> list[str]:
    rows = conversations(sum(counts))
    paths, first = [], 0
    for k, count in enumerate(counts):
        paths.append(write_rows(os.path.join(directory, f"chat{k}.jsonl"),
                                rows[first:first + count]))
        first += count
    return paths


def build(shards, cache, factory, *, seed=5, shared=None, **options):
    raw = mdc.RawShards(shards, factory, text_key="messages", window=2, piece_size=2048,
                        shared=shared)
    eod = int(factory().eod_id)
    config = mdc.GPTDataConfig(random_seed=seed, sequence_length=S, blend=([raw], None),
                               split="100,0,0", path_to_cache=str(cache), eod_id=eod,
                               **options)
    return mdc.build_datasets(config, [120, None, None])[0]


def finish(dataset, timeout: float = 120.0) -> None:
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


def label_roles(dataset, count: int) -> np.ndarray:
    """uint8 [count, S] the role of every label of the dataset's first ``count`` samples,
    read as tokens from the merged shards' roles (a GPT dataset over a chain of them,
    with each window's pieces and seed: the same sample layout)."""
    corpus, rows = dataset.corpus, []
    window, local = dataset.locate(np.arange(count, dtype=np.int64))
    for w, k in zip(window.tolist(), local.tolist()):
        parts = []
        for piece in dataset._window_pieces(w).tolist():
            prefix, first, stop = corpus.locate(piece)
            parts.append((mdc.IndexedDataset(roles_prefix(prefix)), first, stop))
        chain = CorpusChain(parts)
        twin = mdc.GPTDataset(chain, np.arange(len(chain)), None, dataset._window_config(w),
                              dataset.split)
        rows.append(twin[k]["labels"])
    return np.stack(rows).astype(np.uint8)


def test_pieces_shards_and_corpus_carry_the_roles_megadata_preprocess_writes(tmp_path,
                                                                         tokenizer_dir):
    shards = chat_shards(tmp_path)
    factory = chat_factory(tokenizer_dir)
    train = build(shards, tmp_path / "cache", factory)
    train.__getitems__(np.arange(8))
    finish(train)
    corpus = train.corpus
    for k, path in enumerate(shards):
        reference = str(tmp_path / f"reference{k}")
        preprocess_jsonl([path], reference, factory, json_keys=["messages"], append_eod=True)
        for suffix, prefix in (("", corpus.shard_prefix(k)),
                               ("_roles", roles_prefix(corpus.shard_prefix(k)))):
            for ext in (".bin", ".idx"):
                assert filecmp.cmp(f"{reference}_messages_document{suffix}{ext}",
                                   prefix + ext, shallow=False)
        assert has_roles(corpus.shard_prefix(k))
    assert os.listdir(os.path.join(corpus.directory, "pieces")) == []
    listed = json.loads(open(os.path.join(corpus.directory, "corpus.json")).read())
    assert listed["roles"] == [roles_prefix(p) for p in listed["prefixes"]]
    status = directory_status(corpus.directory)
    assert status["complete"] and status["tokens_made"] == sum(listed["tokens"])


def test_every_piece_made_has_its_roles_in_its_manifest(tmp_path, tokenizer_dir):
    shards = chat_shards(tmp_path, counts=(120,))
    slow = functools.partial(SlowChat, chat_factory(tokenizer_dir), 0.01)
    corpus = build(shards, tmp_path / "cache", slow).corpus  # (the first piece made)

    def made() -> list[int]:
        return [i for i in range(corpus.pieces)
                if (found := corpus.locate(i)) is not None and found[2] is None]

    ends = time.monotonic() + 60
    while len(made()) < 2 and time.monotonic() < ends:
        time.sleep(0.005)
    corpus.stop()  # the one shard's pieces stay unmerged while some are missing
    made = made()
    assert 2 <= len(made) < corpus.pieces  # (pieces made, the shard not merged)
    for index in made:
        manifest = json.loads(open(os.path.join(corpus.directory, "pieces",
                                                f"{corpus.tasks[index].name}.json")).read())
        roles = os.path.basename(corpus.roles_location(index, corpus.locate(index)[0]))
        assert {f"{roles}.bin", f"{roles}.idx"} <= set(manifest["files"])
        assert manifest["tokens"]["messages"] == manifest["tokens"]["messages_roles"]
        tokens, roles_corpus, first, stop = corpus.open_piece_roles(index)
        assert np.array_equal(tokens.sequence_lengths, roles_corpus.sequence_lengths)


@pytest.mark.parametrize("options", [{}, {"train_on_assistant_responses_only": False},
                                     {"packing": "best_fit", "document_masking": True}])
def test_the_loss_mask_trains_the_labels_whose_roles_train(tmp_path, tokenizer_dir, options):
    shards = chat_shards(tmp_path)
    train = build(shards, tmp_path / "cache", chat_factory(tokenizer_dir), **options)
    batch = train.__getitems__(np.arange(64))
    finish(train)
    roles = label_roles(train, 64)
    if options.get("train_on_assistant_responses_only", True):
        trained = np.isin(roles, [int(Role.ASSISTANT), int(Role.END_OF_TURN)])
    else:
        trained = roles != int(Role.TOOL)
    assert train._window(0).dataset.has_roles
    real = batch["labels"] >= 0  # best_fit pads (pad_id -1): never trained
    # the label after a conversation's EOD is the next conversation's: never trained
    within = batch["tokens"] != train.corpus.eod_id
    assert np.array_equal(batch["loss_mask"] > 0, trained & real & within)
    assert 0 < batch["loss_mask"].mean() < 1


def test_a_finished_corpus_read_again_without_tokenizing_gives_the_same_batches(
        tmp_path, tokenizer_dir):
    shards = chat_shards(tmp_path)
    first = build(shards, tmp_path / "cache", chat_factory(tokenizer_dir))
    expected = batches(first, 8, size=8)
    finish(first)
    raw_member.stop_raw_corpora()
    again = build(shards, tmp_path / "cache", chat_factory(tokenizer_dir))

    def refuse():
        raise AssertionError("tokenized again")

    again.corpus.tokenizer_factory = refuse
    assert same(batches(again, 8, size=8), expected)
    assert not again.corpus._producing()
    assert "loss_mask" in expected[0] and 0 < expected[0]["loss_mask"].mean() < 1


def test_a_second_cache_over_a_shared_store_fetches_the_roles(tmp_path, tokenizer_dir):
    shards = chat_shards(tmp_path)
    factory = chat_factory(tokenizer_dir)
    one = build(shards, tmp_path / "one", factory, shared=str(tmp_path / "shared"))
    expected = batches(one, 6, size=8)
    finish(one)
    uploaded = os.listdir(tmp_path / "shared" / one.corpus.key / "pieces")
    assert any("_messages_roles_" in name for name in uploaded)
    raw_member.stop_raw_corpora()
    two = build(shards, tmp_path / "two", factory, shared=str(tmp_path / "shared"))
    two.corpus.made_here.clear()
    assert same(batches(two, 6, size=8), expected)
    finish(two)
    assert two.corpus.made_here == []  # every piece (tokens and roles) fetched
    for k in range(len(shards)):
        for ext in (".bin", ".idx"):
            assert filecmp.cmp(roles_prefix(one.corpus.shard_prefix(k)) + ext,
                               roles_prefix(two.corpus.shard_prefix(k)) + ext, shallow=False)


def test_chains_whose_roles_do_not_fit_their_tokens_are_refused(tmp_path):
    prefix, roles = str(tmp_path / "tokens"), str(tmp_path / "roles")
    with mdc.IndexedDatasetWriter(prefix, dtype=np.int32) as writer:
        writer.add_document(np.arange(1, 11), [10])
        writer.add_document(np.arange(11, 17), [6])
    for path, dtype, lengths in ((roles, np.uint8, [10, 5]), (roles + "16", np.uint16, [10, 6])):
        with mdc.IndexedDatasetWriter(path, dtype=dtype) as writer:
            for length in lengths:
                writer.add_document(np.full(length, int(Role.ASSISTANT)), [length])
    tokens = mdc.IndexedDataset(prefix)
    config = mdc.GPTDataConfig(random_seed=1, sequence_length=4)
    with pytest.raises(mdc.DataError, match="1 roles corpora for 2 parts"):
        CorpusChain([(tokens, 0, 1), (tokens, 1, 2)], [mdc.IndexedDataset(roles)])
    short = CorpusChain([(tokens, 0, 2)], [mdc.IndexedDataset(roles)])
    with pytest.raises(mdc.DataError, match=r"the chain of .*roles\.idx: its sequence lengths "
                                            r"differ .*tokens\.idx: entry 1 is 5, the tokens' 6\)"):
        mdc.GPTDataset(short, np.arange(2), None, config)
    wide = CorpusChain([(tokens, 0, 2)], [mdc.IndexedDataset(roles + "16")])
    with pytest.raises(mdc.DataError, match=r"roles16\.idx: dtype uint16"):
        mdc.GPTDataset(wide, np.arange(2), None, config)


def test_a_parquet_shard_of_messages_streams_as_its_json_lines_twin(tmp_path, tokenizer_dir):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = conversations(80)
    pq.write_table(pa.table({"messages": [row["messages"] for row in rows]}),
                   tmp_path / "chat.parquet", row_group_size=16)
    lines = write_rows(tmp_path / "chat.jsonl", rows)
    factory = chat_factory(tokenizer_dir)
    table = build([str(tmp_path / "chat.parquet")], tmp_path / "table", factory)
    finish(table)
    text = build([lines], tmp_path / "lines", factory)
    finish(text)
    for ours, theirs in ((table.corpus.shard_prefix(0), text.corpus.shard_prefix(0)),
                         (roles_prefix(table.corpus.shard_prefix(0)),
                          roles_prefix(text.corpus.shard_prefix(0)))):
        for ext in (".bin", ".idx"):
            assert filecmp.cmp(ours + ext, theirs + ext, shallow=False)
    assert 0 < table.__getitems__(np.arange(8))["loss_mask"].mean() < 1


def test_a_refused_conversation_names_its_shard_and_line(tmp_path, tokenizer_dir):
    rows = conversations(30)
    rows[4] = {"messages": "not a list of messages"}
    shard = write_rows(tmp_path / "bad.jsonl", rows)
    with pytest.raises(mdc.DataError, match=r"bad\.jsonl, line 5"):
        train = build([shard], tmp_path / "cache", chat_factory(tokenizer_dir))
        train.__getitems__(np.arange(len(train)))
