"""tools/inspect_data.py on the demo corpora and a small blend: the files it writes, the
numbers it prints (against the core's, computed here independently), one-line errors;
and the progress bars of the tools: on a terminal only, never with --noprogress."""

from __future__ import annotations

import fcntl
import html.parser
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import pytest
from corpora import write_corpus
from tool_configs import write_tool_config

import megadata_core as mdc
from megadata_core.preprocess import ByteTokenizer, preprocess_jsonl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from megadata_cli.make_demo_corpus import build_demo_corpus  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's packages


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The demo corpora (standard-library sources and docstrings, byte tokens), a small
    synthetic pair with short documents, and configs over them."""
    root = tmp_path_factory.mktemp("inspect")
    prefixes = {}
    for name, kind in (("code", "source"), ("docs", "docstrings")):
        jsonl = root / f"{name}.jsonl"
        build_demo_corpus(str(jsonl), max_documents=40, kind=kind, max_bytes=300_000)
        summary = preprocess_jsonl([str(jsonl)], str(root / name), ByteTokenizer, append_eod=True)
        prefixes[name] = summary.output_prefixes["text"]
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        write_corpus(str(root / name), rng.integers(3, 40, 200), rng, low=1, vocab=1000, eod=0)
    demo = write_tool_config(root / "demo.py", f"""
c.data_path = '0.7 {prefixes["code"]} 0.3 {prefixes["docs"]}'
c.split = '80,20,0'
c.sequence_length = 128
c.eod_id = 256
c.create_attention_mask = False
c.train_samples, c.valid_samples = 3000, 100
""", root / "cache")
    small = write_tool_config(root / "small.py", f"""
c.data_path = '0.6 {root / "a"} 0.4 {root / "b"}'
c.split = '90,8,2'
c.sequence_length = 64
c.eod_id = 0
c.eod_mask_loss = True
c.create_attention_mask = False
c.train_samples, c.valid_samples, c.test_samples = 500, 50, 10
""", root / "cache")
    empty = write_tool_config(root / "empty.py", "c.sequence_length = 64", root / "cache")
    return {"root": root, **prefixes, "demo": demo, "small": small, "empty": empty}


def _run(data, *args: str, out: str = "out") -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "tools" / "inspect_data.py"), *args, "--noprogress",
               f"--output_dir={data['root'] / out}"]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=ENV)


def _wrote(result: subprocess.CompletedProcess) -> list[Path]:
    assert result.returncode == 0, result.stderr
    paths = [Path(line.split(" (")[0].strip()) for line in
             result.stdout.split("wrote:\n")[1].splitlines() if line.startswith("  ")]
    assert paths
    return paths


def _check_png(path: Path) -> None:
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_MAGIC
    image = matplotlib.image.imread(str(path))
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def _built(config_path: Path):
    from megadata_cli.data_config import to_gpt_config

    namespace: dict = {}
    exec(config_path.read_text(), namespace)
    config, sizes, _ = to_gpt_config(namespace["get_config"]())
    return config, mdc.build_datasets(config, sizes)


def test_corpus_prints_the_counts_and_plots_the_lengths(data):
    result = _run(data, "corpus", data["code"], "--eod_id=256")
    (png,) = _wrote(result)
    _check_png(png)
    corpus = mdc.IndexedDataset(data["code"])
    sequences = [np.asarray(corpus[i]) for i in range(len(corpus))]
    bounds = corpus.document_indices
    lengths = np.array([sum(len(s) for s in sequences[bounds[d]:bounds[d + 1]])
                        for d in range(len(bounds) - 1)])
    eod = sum(int((s == 256).sum()) for s in sequences)
    out = result.stdout
    assert f"documents  {len(lengths):,}" in out and f"sequences  {len(corpus):,}" in out
    assert f"tokens     {lengths.sum():,}" in out and "dtype      uint16" in out
    assert f"EOD        {eod:,} tokens of id 256; {len(lengths)} of {len(lengths)}" in out
    for q in (0, 10, 50, 90, 100):
        assert re.search(rf"p{q}={np.percentile(lengths, q):,.0f}\s", out)


def test_config_prints_tables_and_shares_of_both_orders(data):
    result = _run(data, "config", f"--config={data['demo']}")
    paths = _wrote(result)
    assert sorted(p.name for p in paths) == ["train_blend_shares.png", "valid_blend_shares.png"]
    for path in paths:
        _check_png(path)
    config, (train, _, _) = _built(data["demo"])
    out = result.stdout
    for order in ("balanced", "megatron"):
        from dataclasses import replace

        blend = train if order == config.blend_order else mdc.build_datasets(
            replace(config, blend_order=order, path_to_cache=None), [3000, 100, None])[0]
        index = np.asarray(blend.dataset_index)
        shares = np.bincount(index, minlength=2) / len(index)
        running = np.cumsum(np.eye(2)[index], axis=0)
        weights = np.array([0.7, 0.3])
        distance = np.abs(running - np.outer(np.arange(1, len(index) + 1), weights)).max(axis=0)
        line = next(line for line in out.splitlines() if line.startswith(f"  {order}"))
        assert f"realized shares {shares[0]:.4f} {shares[1]:.4f}" in line
        assert f"largest distance {distance[0]:.3f} {distance[1]:.3f} samples" in line
    for member in train.datasets:  # the table's epochs: whole epochs of the split's tokens
        tokens = int(member.indexed.sequence_lengths[member.indices].sum())
        epochs = -(-(member.num_samples * 128 + 1) // tokens)
        assert re.search(rf"{re.escape(member.indexed.path_prefix[-40:])}.* {epochs} ", out)


def test_samples_mark_documents_and_masked_tokens(data):
    result = _run(data, "samples", f"--config={data['small']}", "--indices=0,7,123", "--html")
    (page,) = _wrote(result)
    config, (train, _, _) = _built(data["small"])
    blocks = result.stdout.split("\nwrote:")[0].split("\nsample ")[1:]
    assert len(blocks) == 3
    for index, block in zip((0, 7, 123), blocks):
        heading, text = block.split("\n", 1)
        sample = train[index]
        member = train.datasets[int(sample["dataset_id"])]
        k = int(train.dataset_sample_index[index])
        row = int(member.shuffle_index[k])
        (b, _), (e, f) = member.sample_index[row], member.sample_index[row + 1]
        documents = member.document_index[b : e + (1 if f > 0 else 0)].tolist()
        assert heading.startswith(f"{index} of train (dataset {int(sample['dataset_id'])} ")
        assert f"{len(documents)} document(s) {documents}" in heading
        masked = int((sample["loss_mask"] == 0).sum())
        assert masked == int((sample["tokens"] == 0).sum()) and f", {masked} loss-masked" in heading
        assert re.findall(r"⟦doc (\d+)⟧", text) == [str(d) for d in documents]
        ids = [int(t) for t in re.findall(r"\d+", re.sub(r"⟦doc \d+⟧", " ", text.replace(
            "⟨eod⟩", " 0 ")))]
        assert ids == sample["tokens"].tolist()
    content = page.read_text(encoding="utf-8")
    assert content.startswith("<!DOCTYPE html>") and content.count("class='sample'") == 3
    parser = html.parser.HTMLParser()
    parser.feed(content)
    parser.close()


def test_samples_decode_text_with_a_tokenizer(data):
    result = _run(data, "samples", f"--config={data['demo']}", "--indices=5",
                  "--tokenizer_type=bytes")
    assert result.returncode == 0, result.stderr
    _, (train, _, _) = _built(data["demo"])
    text = result.stdout.split("\nsample 5 ")[1].split("\n", 1)[1].rstrip("\n")
    plain = re.sub(r"⟦doc \d+⟧", "", text).replace("⟨eod⟩", "")
    assert plain == ByteTokenizer().decode(train[5]["tokens"])


def test_order_maps_the_first_batches(data):
    result = _run(data, "order", f"--config={data['demo']}", "--global_batch_size=16",
                  "--batches=20", "--regions=10")
    (png,) = _wrote(result)
    _check_png(png)
    _, (train, _, _) = _built(data["demo"])
    index = np.asarray(train.dataset_index)[:320]
    for j, member in enumerate(train.datasets):
        count = int((index == j).sum())
        rows = member.shuffle_index[train.dataset_sample_index[:320][index == j]]
        first = member.document_index[member.sample_index[rows, 0]]
        regions = len(np.unique(first * 10 // len(member.indexed)))
        assert f"dataset {j} {member.indexed.path_prefix}: {count:,} samples " \
               f"({count / 320:.4f}), starting in {regions} of 10 regions" in result.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["corpus", "{root}/no_such_corpus"], "no_such_corpus"),
        (["config", "--config={empty}"], "data_path: the config names no data"),
        (["samples", "--config={small}", "--indices=0,999999"], "sample 999999 is outside"),
        (["samples", "--config={small}", "--tokenizer_type=huggingface",
          "--tokenizer_file={root}/missing.json"], "missing.json"),
        (["samples", "--config={small}", "--indices=x"], "--indices"),
    ],
)
def test_bad_input_is_one_line_error(data, args, message):
    args = [arg.format(root=data["root"], empty=data["empty"], small=data["small"])
            for arg in args]
    result = _run(data, *args)
    assert result.returncode == 1
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert "Traceback" not in result.stderr


def _under_pty(command: list[str]) -> tuple[int, str]:
    """Run with stderr on a terminal; returns the exit status and what the terminal got."""
    leader, follower = pty.openpty()
    # a terminal of 24 x 100 (a new pty has 0 columns: tqdm would draw an empty bar)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=follower, cwd=ROOT,
                               env=ENV)
    os.close(follower)
    seen = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:  # a hang fails here, not the whole run
            process.kill()
            raise AssertionError(f"no output for 120 s from {command}")
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    return process.wait(timeout=60), seen.decode("utf-8", "replace")


def _tool_commands(data, name: str) -> list[str]:
    root = data["root"]
    tools = ROOT / "tools"
    if name == "build_index":
        return [sys.executable, str(tools / "build_index.py"), f"--config={data['small']}",
                "--config.random_seed=7"]
    if name == "merge_datasets":
        return [sys.executable, str(tools / "merge_datasets.py"), f"--input={root}/a,{root}/b",
                f"--output_prefix={root}/merged"]
    return [sys.executable, str(tools / "preprocess_data.py"), f"--input={root}/docs.jsonl",
            f"--output_prefix={root}/again", "--append_eod"]


BARS = {  # what each tool's bar shows once it is done
    "build_index": r"building indices: 100%\|",
    "merge_datasets": r"merging: 100%\|",
    "preprocess_data": r"tokenizing: 40\.0 docs ",
}


@pytest.mark.parametrize("name", sorted(BARS))
def test_progress_bar_on_a_terminal_only(data, name):
    command = _tool_commands(data, name)
    status, terminal = _under_pty(command)
    assert status == 0, terminal
    assert re.search(BARS[name], terminal), terminal
    label = BARS[name].split(":")[0]
    status, terminal = _under_pty([*command, "--noprogress"])
    assert status == 0 and label not in terminal and "%|" not in terminal, terminal
    piped = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT,
                           env=ENV)
    assert piped.returncode == 0, piped.stderr
    assert label not in piped.stderr and "%|" not in piped.stderr, piped.stderr


def test_segment_ids_are_marked_when_samples_carry_them():
    from megadata_cli import inspect_samples

    tokens = np.array([7, 8, 0, 9, 0, 5])
    documents = np.array([3, 3, 3, 4, 4, 4])
    segments = np.array([0, 0, 0, 1, 1, 2])  # a packed sample: a new segment at token 5
    loss_mask = np.array([1, 1, 0, 1, 0, 1])
    runs = inspect_samples.runs(tokens, documents, loss_mask, segments, eod_id=0)
    text = inspect_samples.as_text(tokens, runs, None)
    assert text == ("⟦doc 3 · seg 0⟧7 8 [masked: ⟨eod⟩]⟦doc 4 · seg 1⟧9 [masked: ⟨eod⟩]"
                    "⟦doc 4 · seg 2⟧5 ")
    page = inspect_samples.as_html("t", [("h", tokens, runs)], None)
    assert page.count("class='mark'") == 3 and "seg 2" in page
    plain = inspect_samples.as_text(tokens, inspect_samples.runs(
        tokens, documents, loss_mask, None, eod_id=0), None)
    assert "seg" not in plain and plain.count("⟦doc") == 2



class _Runs(html.parser.HTMLParser):
    """Each sample's runs on a samples page: (classes, first token, last token)."""

    def __init__(self) -> None:
        super().__init__()
        self.samples: list[list[tuple[set, int, int]]] = []

    def handle_starttag(self, tag, attrs) -> None:
        attrs = dict(attrs)
        if tag == "div" and attrs.get("class") == "sample":
            self.samples.append([])
        found = re.search(r"tokens (\d+)\.\.(\d+)$", attrs.get("title") or "")
        if tag == "span" and found and self.samples:
            classes = set((attrs.get("class") or "").split())
            self.samples[-1].append((classes, int(found[1]), int(found[2])))


def _positions(runs, name: str) -> list[int]:
    return sorted(t for classes, a, b in runs if name in classes for t in range(a, b + 1))


def test_samples_html_marks_the_trained_positions_of_a_conversation_corpus(data):
    """A conversation corpus blended with a plain one: on the page, a conversation
    sample's ``trained`` runs are exactly its positions with loss mask 1 (the oracle's,
    from the roles), the rest ``context``; a plain sample keeps struck-through masks."""
    from conversation_corpora import Corpora

    root = data["root"] / "conversations"
    root.mkdir(exist_ok=True)
    corpora = Corpora(str(root))
    config = write_tool_config(root / "chat.py", f"""
c.data_path = '0.5 {corpora.chat} 0.5 {corpora.plain}'
c.split = '100,0,0'
c.sequence_length = 16
c.create_attention_mask = False
c.train_samples = 40
""", root / "cache")
    indices = list(range(12))
    result = _run(data, "samples", f"--config={config}",
                  f"--indices={','.join(map(str, indices))}", "--html", out="chat")
    (page,) = _wrote(result)
    _, (train, _, _) = _built(config)
    batch = train.__getitems__(np.array(indices))
    chat = corpora.chat_rows(batch["tokens"])
    assert chat.any() and (~chat).any()
    headings = [line for line in result.stdout.splitlines() if line.startswith("sample ")]
    assert ["conversation corpus:" in line for line in headings] == chat.tolist()
    parser = _Runs()
    parser.feed(page.read_text(encoding="utf-8"))
    assert len(parser.samples) == len(indices)
    for row, runs in enumerate(parser.samples):
        mask = batch["loss_mask"][row]
        trained, masked = np.flatnonzero(mask).tolist(), np.flatnonzero(mask == 0).tolist()
        if chat[row]:
            expected = corpora.expected_mask(batch["tokens"][row : row + 1],
                                             batch["labels"][row : row + 1])[0]
            assert trained == np.flatnonzero(expected).tolist()
            assert _positions(runs, "trained") == trained
            assert _positions(runs, "context") == masked
            assert _positions(runs, "masked") == []
            assert f"{len(trained)} trained (labels of ASSISTANT+END_OF_TURN)" in headings[row]
        else:
            assert _positions(runs, "trained") == _positions(runs, "context") == []
            assert _positions(runs, "masked") == masked
    # the batch page (batch --step N --html) marks the same positions of the same samples
    result = _run(data, "batch", f"--config={config}", "--step=0", "--global_batch_size=12",
                  "--html", out="chat")
    (page,) = _wrote(result)
    parser = _Runs()
    parser.feed(page.read_text(encoding="utf-8"))
    assert len(parser.samples) == len(indices)
    for row, runs in enumerate(parser.samples):
        name = "trained" if chat[row] else "masked"
        mask = batch["loss_mask"][row] != 0 if chat[row] else batch["loss_mask"][row] == 0
        assert _positions(runs, name) == np.flatnonzero(mask).tolist()


def test_samples_html_needs_a_conversation_flag_per_sample():
    from megadata_cli import inspect_samples

    tokens = np.array([4, 5, 6])
    runs = inspect_samples.runs(tokens, np.zeros(3, int), np.array([0, 1, 1]), None, None)
    page = inspect_samples.as_html("t", [("h", tokens, runs)], None, [True])
    # the legend's and the run's
    assert page.count("class='trained'") == page.count("class='context'") == 2
    assert "class='trained'" not in inspect_samples.as_html("t", [("h", tokens, runs)], None)
    with pytest.raises(mdc.DataError, match="conversations: 2 flags for 1 samples"):
        inspect_samples.as_html("t", [("h", tokens, runs)], None, [True, False])

def test_preprocess_merge_phase_has_its_bar_only_when_it_merges(data):
    command = _tool_commands(data, "preprocess_data")
    status, terminal = _under_pty([*command, "--partitions=2"])
    assert status == 0, terminal
    assert re.search(r"merging: 2 shards", terminal), terminal
    status, terminal = _under_pty(command)  # one partition: nothing to merge
    assert status == 0 and "merging" not in terminal, terminal


def test_packed_samples_order_and_config(data):
    """best_fit splits (no document or sample index): samples name each bin's documents
    and segments, order maps where the bins start, config prints the packed tables."""
    packed = ["--config.packing=best_fit", "--config.document_masking=True"]
    result = _run(data, "samples", f"--config={data['small']}", "--indices=0,7,123", *packed)
    assert result.returncode == 0, result.stderr
    from dataclasses import replace

    config, _ = _built(data["small"])
    config = replace(config, packing="best_fit", document_masking=True)
    train = mdc.build_datasets(config, [500, 50, 10])[0]
    blocks = result.stdout.split("\nsample ")[1:]
    assert len(blocks) == 3
    first = {}
    for index, block in zip((0, 7, 123), blocks):
        sample = train[index]
        member = train.datasets[int(sample["dataset_id"])]
        row = int(member.shuffle_index[int(train.dataset_sample_index[index])])
        arrays = member._packed
        bins = len(arrays["bin_offsets"]) - 1
        epoch, local = divmod(row, bins)
        base = epoch * int(arrays["bin_offsets"][-1])
        begin, end = arrays["bin_offsets"][local : local + 2] + base
        documents = arrays["piece_document"][begin:end].tolist()
        first[index] = documents[0]
        segments = sorted(set(sample["segment_ids"].tolist()))
        heading = block.split("\n", 1)[0]
        assert f"{len(documents)} document(s) {documents}" in heading
        assert f"segments {segments}" in heading and max(segments) == len(documents)
    order = _run(data, "order", f"--config={data['small']}", "--global_batch_size=8",
                 "--batches=4", "--regions=5", *packed, out="packed_order")
    _wrote(order)
    index = np.asarray(train.dataset_index)[:32]
    for j, member in enumerate(train.datasets):
        count = int((index == j).sum())
        assert f"dataset {j} {member.indexed.path_prefix}: {count:,} samples " in order.stdout
    table = _run(data, "config", f"--config={data['small']}", *packed, out="packed_config")
    _wrote(table)
    assert "best-fit-decreasingpacks" in "".join(table.stdout.split())


def test_config_of_a_blend_schedule_plots_requested_against_realized(data):
    """--blend_schedule (as a string, then as a file): the per-stage shares it prints are
    the core's, and the plot is written."""
    a, b = data["root"] / "a", data["root"] / "b"
    text = f"0: 0.8 {a} 0.2 {b}; 12.8K: 0.3 {a} 0.7 {b}"  # tokens: sample 200 at S=64
    schedule_file = data["root"] / "schedule.txt"
    schedule_file.write_text(f"# warm-up\n0: 0.8 {a} 0.2 {b}\n12.8K: 0.3 {a} 0.7 {b}\n")
    for value in (text, str(schedule_file)):
        result = _run(data, "config", f"--config={data['small']}", f"--blend_schedule={value}",
                      out="schedule_out")
        paths = sorted(_wrote(result))
        assert [path.name for path in paths] == [
            f"{split}_schedule_shares.png" for split in ("test", "train", "valid")
        ]
        _check_png(paths[1])
        out = result.stdout
        assert "a blend schedule of 2 dataset(s)" in out
        config = mdc.GPTDataConfig(random_seed=1234, sequence_length=64, split="90,8,2",
                                   blend_schedule=text, eod_id=0)
        train = mdc.build_datasets(config, [500, 50, 10])[0]
        index = np.asarray(train.dataset_index)
        first = np.bincount(index[:200], minlength=2) / 200
        second = np.bincount(index[200:], minlength=2) / 300
        stages = [line for line in out.split("train: each stage")[1].splitlines()
                  if line.startswith("  stage")]
        assert "requested 0.8000 0.2000; realized " + f"{first[0]:.4f} {first[1]:.4f}" in stages[0]
        assert stages[1].startswith("  stage 1 from sample 200 (step 6)")
        assert f"realized {second[0]:.4f} {second[1]:.4f}" in stages[1]


def test_a_bad_blend_schedule_is_one_line(data):
    result = _run(data, "config", f"--config={data['small']}", "--blend_schedule=0: /a /b")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: blend_schedule[0] blend: no weights; every stage of a schedule states its "
        "mixture (e.g. '0.7 /a 0.3 /b')"
    ]
