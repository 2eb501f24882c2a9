"""The native block path (json_scan + a tokenizer's block encoder, gigatoken where proven)
gives the exact path's documents, and one corpus whatever runs it: the encoder
(gigatoken or the reference), threads, workers, partitions, the task plan's task sizes,
jsonl or parquet."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading

import numpy as np
import pytest
import tokenizer_files as files
from hypothesis import given, settings
from hypothesis import strategies as st
from preprocess_helpers import files_of, read_documents

from megadata_adapters.tokenizing.text_tokenizers import load_tokenizer
from megadata_core import DataError
from megadata_core.preprocess import local_engine, preprocess_jsonl, preprocess_tasks, threads
from megadata_core.preprocess.block_encoding import tokenize_block
from megadata_core.preprocess.encoding import tokenize_chunk
from megadata_core.preprocess.reading import split_lines

pytest.importorskip("gigatoken", reason="the native block path is gigatoken's")

# Raw lines that a native JSON reader and Python's json may read differently, or not at all.
ODD_LINES = [
    b'{"text": "plain ascii"}\n',
    b'{"text": "caf\\u00e9 \\ud83d\\ude00 escaped"}\n',
    b'{"text": "lone \\ud800 surrogate"}\n',
    b'{"text": "first", "text": "duplicate key"}\n',
    b'{"text": 12}\n',
    b'{"other": "no text"}\n',
    b'["not", "an", "object"]\n',
    b"\n",
    b"   \n",
    b'{"text": ""}\n',
    b'{"text": "bad utf-8 \xff\xfe"}\n',
    b'{"text": "tab\\tnewline\\n quote\\" slash\\/ back\\\\"}\n',
    '{"text": "unassigned in 14.0: \U0001fae8 \U0001fabb"}\n'.encode(),
    '{"text": "Zürich 東京 😀 \u2028 \x85"}\n'.encode(),
    b'{ "text" : "spaces around" , "id" : [1, {"x": null}] }\n',
    b'{"text": "truncated\n',
    b'{"text": "no newline at the end"}',
]
WORDS = ["the", " cat", "Zürich", "東京", "😀", "\t", "\n", "  ", "<s>", "</s>", "\\", '"',
         "\U0001fae8", "\u00e9", "e\u0301", "123"]


@pytest.fixture(scope="module")
def tokenizer_options(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("tok"))
    vocab, merges = files.write_gpt2_files(directory)
    return {
        "hf": ("HuggingFaceTokenizer", {"tokenizer_model": files.write_hf_directory(directory)}),
        "gpt2": ("GPT2BPETokenizer", {"vocab_file": vocab, "merge_file": merges}),
        "sp": ("SentencePieceTokenizer",
               {"tokenizer_model": files.write_sentencepiece_model(
                   directory, normalization="identity")}),
        # nmt_nfkc: normalized by the array normalizer, then gigatoken; Python's json
        "spn": ("SentencePieceTokenizer",
                {"tokenizer_model": files.write_sentencepiece_model(directory)}),
        "tt": ("tiktoken", {"path": files.write_tiktoken_ranks(directory)}),
        "mtt": ("TikTokenizer", {"tokenizer_model": files.write_trained_tiktoken_json(directory),
                                 "vocab_size": 1000 + 1999, "tiktoken_pattern": "v2"}),
    }


def _factory(options, name, encoder="auto"):
    kind, kwargs = options[name]
    return functools.partial(load_tokenizer, kind, encoder=encoder, **kwargs)


@pytest.mark.parametrize("name", ["hf", "gpt2", "sp", "spn", "tt", "mtt"])
def test_proven_types_take_gigatoken(tokenizer_options, name):
    tokenizer = _factory(tokenizer_options, name)()
    assert tokenizer.encoder.startswith("gigatoken"), tokenizer.encoder
    assert tokenizer.block_encoder is not None
    reference = _factory(tokenizer_options, name, "reference")()
    assert getattr(reference, "block_encoder", None) is None


def _chunk_fields(chunk):
    return (chunk.documents, {k: v.tolist() for k, v in chunk.tokens.items()},
            {k: v.tolist() for k, v in chunk.sequence_lengths.items()},
            {k: v.tolist() for k, v in chunk.document_sequences.items()},
            chunk.line_offsets.tolist(), chunk.blank_lines, chunk.bad_lines, chunk.bad_examples)


def _outcome(function):
    try:
        return _chunk_fields(function())
    except DataError as error:
        return ("error", str(error))


lines = st.lists(
    st.one_of(
        st.sampled_from(ODD_LINES),
        st.lists(st.sampled_from(WORDS), max_size=12).map(
            lambda words: (json.dumps({"text": "".join(words)}) + "\n").encode()),
        st.text(max_size=30).map(
            lambda text: (json.dumps({"text": text}, ensure_ascii=False) + "\n").encode(
                "utf-8", "surrogatepass")),
    ),
    max_size=25,
)


@pytest.mark.parametrize("name", ["hf", "sp", "spn", "tt", "mtt"])
@settings(max_examples=60, deadline=None)
@given(block=lines, skip_bad_lines=st.booleans(), keep_empty=st.booleans())
def test_block_path_equals_exact_path(tokenizer_options, name, block, skip_bad_lines,
                                      keep_empty):
    tokenizer = _factory(tokenizer_options, name)()
    data = b"".join(block)
    options = dict(path="in.jsonl", first_line=5, append_eod=True, dtype=np.int32,
                   skip_bad_lines=skip_bad_lines, keep_empty=keep_empty)
    native = _outcome(lambda: tokenize_block(data, tokenizer, ("text",), **options))
    exact = _outcome(lambda: tokenize_chunk(split_lines(data), tokenizer, ("text",), **options))
    assert native == exact


def _odd_corpus(directory, count=400):
    """A jsonl of ``count`` lines: varied texts and every odd line that is still valid."""
    rng = np.random.default_rng(0)
    bad = (b"\xff", b'"text": 12', b"no text", b"\\ud800", b'["not"')
    valid = [line for line in ODD_LINES[:-2]
             if line.strip() and not any(part in line for part in bad)]
    records = []
    for i in range(count):
        if i % 9 == 0:
            records.append(valid[(i // 9) % len(valid)])
        else:
            words = rng.choice(WORDS, size=int(rng.integers(0, 40)))
            records.append((json.dumps({"text": f"doc {i}" + "".join(words)}) + "\n").encode())
    path = os.path.join(directory, "in.jsonl")
    with open(path, "wb") as stream:
        stream.write(b"".join(records))
    return path


@pytest.mark.parametrize("name", ["hf", "sp", "spn", "tt", "mtt"])
def test_one_corpus_whatever_runs_it(tmp_path, tokenizer_options, name, monkeypatch):
    source = _odd_corpus(str(tmp_path))
    run = functools.partial(preprocess_jsonl, [source], append_eod=True, chunk_bytes=2048)
    reference = run(str(tmp_path / "ref"), _factory(tokenizer_options, name, "reference"))
    expected = files_of(reference.output_prefixes["text"])
    assert reference.documents == 400
    giga = _factory(tokenizer_options, name)
    outputs = {
        "gigatoken, threads": run(str(tmp_path / "threads"), giga),
        "gigatoken, 2 workers": run(str(tmp_path / "workers"), giga, workers=2),
    }
    monkeypatch.setattr(threads, "threads_for_native", lambda: 1)
    outputs["gigatoken, one thread"] = run(str(tmp_path / "one"), giga)
    for what, summary in outputs.items():
        assert files_of(summary.output_prefixes["text"]) == expected, what
    for task_size in (1500, 9000, 1 << 20):
        summary = preprocess_tasks([source], str(tmp_path / f"t{task_size}"), giga,
                                   append_eod=True, task_size=task_size,
                                   engine=local_engine(2 if task_size == 9000 else 1))
        assert files_of(summary.output_prefixes["text"]) == expected, task_size
    partitioned = {
        encoder: run(str(tmp_path / f"p-{encoder}"), _factory(tokenizer_options, name, encoder),
                     partitions=3)
        for encoder in ("auto", "reference")
    }
    assert (files_of(partitioned["auto"].output_prefixes["text"])
            == files_of(partitioned["reference"].output_prefixes["text"]))
    assert sorted(map(str, read_documents(partitioned["auto"].output_prefixes["text"]))) == \
        sorted(map(str, read_documents(reference.output_prefixes["text"])))


def test_a_task_on_threads_names_the_files_line_numbers(tmp_path, tokenizer_options,
                                                        monkeypatch):
    """Run in this process, a lines task tokenizes its blocks on threads (as
    preprocess_jsonl does): the corpus is the one-thread corpus, and bad lines in tasks
    past the first are named by the file's line numbers, skipped or raised."""
    from megadata_core.preprocess import tasks

    monkeypatch.setattr(tasks, "CHUNK_BYTES", 64)  # several blocks per task
    monkeypatch.setattr(threads, "threads_for_native", lambda: 3)
    asked = []
    in_order = threads.in_order
    monkeypatch.setattr(threads, "in_order", lambda items, work, count: asked.append(count)
                        or in_order(items, work, count))
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(("".join(f'{{"text": "line {i} Zürich"}}\n' for i in range(20))
                     + "{oops\n").encode() * 3)  # bad lines 21, 42, 63
    giga = _factory(tokenizer_options, "hf")
    expected = files_of(preprocess_jsonl(
        [str(bad)], str(tmp_path / "ref"), _factory(tokenizer_options, "hf", "reference"),
        append_eod=True, skip_bad_lines=True).output_prefixes["text"])
    summary = preprocess_tasks([str(bad)], str(tmp_path / "t"), giga, append_eod=True,
                               skip_bad_lines=True, task_size=300, engine=local_engine(1))
    assert asked and set(asked) == {3}
    assert files_of(summary.output_prefixes["text"]) == expected
    assert summary.bad_lines == 3 and summary.documents == 60
    assert [e.split(": ")[0].rsplit(", ", 1)[1] for e in summary.bad_line_examples] == [
        "line 21", "line 42", "line 63"]
    with pytest.raises(DataError, match=r"bad\.jsonl, line 21: invalid JSON"):
        preprocess_tasks([str(bad)], str(tmp_path / "u"), giga, append_eod=True,
                         task_size=300, engine=local_engine(1))


@pytest.mark.parametrize("name", ["hf", "spn"])
def test_parquet_gives_the_jsonl_corpus(tmp_path, tokenizer_options, name):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from megadata_adapters.engines.parquet_records import ParquetReader

    source = _odd_corpus(str(tmp_path))
    with open(source, encoding="utf-8", errors="surrogatepass") as stream:
        texts = [json.loads(line)["text"] for line in stream]
    table = pa.table({"text": [t.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
                               for t in texts]})
    parquet = str(tmp_path / "in.parquet")
    pq.write_table(table, parquet, row_group_size=37)
    jsonl = str(tmp_path / "same.jsonl")
    with open(jsonl, "w", encoding="utf-8") as stream:
        for text in table.column("text").to_pylist():
            stream.write(json.dumps({"text": text}) + "\n")
    giga = _factory(tokenizer_options, name)
    expected = files_of(preprocess_jsonl([jsonl], str(tmp_path / "j"), giga, append_eod=True)
                        .output_prefixes["text"])
    for workers in (1, 2):
        summary = preprocess_jsonl([parquet], str(tmp_path / f"q{workers}"), giga,
                                   append_eod=True, workers=workers, table_reader=ParquetReader())
        assert files_of(summary.output_prefixes["text"]) == expected, workers
    summary = preprocess_tasks([parquet], str(tmp_path / "tasks"), giga, append_eod=True,
                               task_size=4000, table_reader=ParquetReader())
    assert files_of(summary.output_prefixes["text"]) == expected


def test_in_order_keeps_input_order_and_raises_in_order():
    events = threading.Event()

    def work(item):
        if item % 3 == 0:
            events.wait(0.01)  # later items finish first
        if item == 17:
            raise DataError("item 17")
        return item * item

    with threads.in_order(range(40), work, 4) as results:
        seen = []
        with pytest.raises(DataError, match="item 17"):
            for item, result in results:
                seen.append((item, result))
    assert seen == [(i, i * i) for i in range(17)]
    with threads.in_order(iter(range(30)), work if False else (lambda i: -i), 3) as results:
        assert list(results) == [(i, -i) for i in range(30)]
    assert 1 <= threads.threads_for_native() <= 4


def test_in_order_keeps_its_threads_and_a_forked_child_starts_its_own():
    """Threads outlive a call (starting one costs milliseconds while others hold the GIL);
    leaving early cancels the items not started; a forked child has no threads of the
    parent's, so it makes its own pool."""
    seen = set()

    def work(item):
        seen.add(threading.get_ident())
        return item

    for _ in range(3):
        with threads.in_order(range(20), work, 2) as results:
            assert [r for _, r in results] == list(range(20))
    assert 1 <= len(seen) <= 2
    started = []
    with threads.in_order(range(100), lambda i: started.append(i) or i, 2) as results:
        assert next(results) == (0, 0)
    assert len(started) < 100  # the rest cancelled, not run
    child = os.fork()
    if child == 0:  # the child: exits 0 only when its own pool works
        try:
            with threads.in_order(range(10), lambda i: i + 1, 2) as results:
                os._exit(0 if [r for _, r in results] == list(range(1, 11)) else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("name", ["hf", "gpt2", "sp", "spn", "tt", "mtt"])
def test_threads_encoding_at_once_take_instances_of_their_own(tokenizer_options, name):
    """A thread finding every gigatoken instance busy loads another from the proven source
    (up to max_instances; then it shares one), with the same ids."""
    from megadata_adapters.tokenizing import gigatoken_encoders

    kind, options = tokenizer_options[name]
    giga = load_tokenizer(kind, **options, encoder="gigatoken").block_encoder
    giga = giga.with_unproven(giga.unproven)  # an encoder of its own: a fresh count
    giga.max_instances = gigatoken_encoders.MAX_INSTANCES  # (one per two usable cores)
    block = b"".join(line for line in ODD_LINES if b"text" in line and b"\\ud800" not in line)
    alone = giga.encode_jsonl(block, "text")
    assert giga._instances == 1  # one call at a time: the one instance served it
    with contextlib.ExitStack() as busy:
        held = [busy.enter_context(giga._instance())
                for _ in range(gigatoken_encoders.MAX_INSTANCES - 1)]
        assert len({id(tokenizer) for tokenizer in held}) == len(held)
        beside = giga.encode_jsonl(block, "text")  # the last instance: loaded for it
        assert giga._instances == gigatoken_encoders.MAX_INSTANCES
        held.append(busy.enter_context(giga._instance()))
        shared = giga.encode_jsonl(block, "text")  # every one busy: shares the first
        assert giga._instances == gigatoken_encoders.MAX_INSTANCES
    for ids, lengths in (beside, shared):
        assert (ids == alone[0]).all() and (lengths == alone[1]).all()


@pytest.mark.parametrize("name", ["hf", "sp", "mtt"])
def test_one_shared_instance_serves_threads_at_once(tokenizer_options, name):
    """With one instance (2 usable cores), threads encode blocks, batches and single texts
    on it at once: no "Already borrowed", the ids of one thread alone."""
    kind, options = tokenizer_options[name]
    tokenizer = load_tokenizer(kind, **options, encoder="gigatoken")
    giga = tokenizer.block_encoder.with_unproven(tokenizer.block_encoder.unproven)
    giga.max_instances = 1
    block = b"".join(line for line in ODD_LINES[:2] + ODD_LINES[11:15]) * 50
    texts = [json.loads(line)["text"] for line in block.splitlines()]
    calls = [lambda: giga.encode_jsonl(block, "text"), lambda: giga.encode_batch(texts),
             lambda: [giga.encode(text) for text in texts[:40]]]
    alone = [call() for call in calls]
    results: dict = {}
    workers = [threading.Thread(target=lambda k=k: results.__setitem__(
        k, [calls[k % 3]() for _ in range(5)])) for k in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert giga._instances == 1 and sorted(results) == list(range(6))
    for k, found in results.items():
        for result in found:
            expected = alone[k % 3]
            if isinstance(expected, list):
                assert [r.tolist() for r in result] == [e.tolist() for e in expected]
            else:
                assert all((a == b).all() for a, b in zip(result, expected))


class _OwnIdsOnUnproven:
    """A tokenizer whose own ids (one more id, 0, at the end) differ from its block
    encoder's on texts holding a code point that encoder is not proven on."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self.block_encoder = tokenizer.block_encoder
        self.eod_id, self.vocab_size = tokenizer.eod_id, tokenizer.vocab_size

    def encode(self, text):
        ids = np.asarray(self._tokenizer.encode(text), np.int64)
        return np.append(ids, 0) if self.block_encoder.needs_reference(text) else ids

    def encode_batch(self, texts):
        arrays = [self.encode(text) for text in texts]
        return (np.concatenate(arrays) if arrays else np.zeros(0, np.int64),
                np.array([len(ids) for ids in arrays], np.int64))


@pytest.mark.parametrize("name", ["hf", "tt", "mtt"])
@pytest.mark.parametrize("odd", [False, True])
def test_lines_with_unproven_code_points_take_the_tokenizers_ids(tokenizer_options, name, odd):
    """A line holding a code point the block encoder is not proven on is read natively, but
    its text's ids are the tokenizer's own (beside exact-path lines or not)."""
    tokenizer = _OwnIdsOnUnproven(_factory(tokenizer_options, name)())
    lines = [b'{"text": "plain"}\n', '{"text": "new \U0001fae8 emoji", "id": 1}\n'.encode(),
             b'{"text": "caf\\u00e9"}\n', b'{"text": "\\ud83e\\udee8 escaped"}\n',
             '{"other": "\U0001fae8", "text": "only elsewhere"}\n'.encode()]
    if odd:
        lines.insert(2, b'{"text": "first", "text": "duplicate key"}\n')
    data = b"".join(lines * 3)
    options = dict(path="in.jsonl", first_line=1, append_eod=True, dtype=np.int32)
    native = _chunk_fields(tokenize_block(data, tokenizer, ("text",), **options))
    exact = _chunk_fields(tokenize_chunk(split_lines(data), tokenizer, ("text",), **options))
    assert native == exact
    assert native[1]["text"].count(0) >= 6  # the marked texts: two per copy
