"""tools/inspect_data.py batch and where: every printed line (sample, dataset, document
id, token range, text range, step, rank) against an independent walk of the built
split's index arrays (tests/helpers/provenance_walk.py), for both shuffles and both
packings over a blend; the HTML page; the batch-size schedule; one-line errors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from corpora import write_corpus
from provenance_walk import samples_holding, walk
from tool_configs import write_tool_config

import megadata_core as mdc
from megadata_core.batch_ramp import BatchSizeSchedule

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
SEQ = 32
SEGMENT = re.compile(r"    text \[(\d+), (\d+)\): dataset (\d+) (\S+) document (\d+) tokens "
                     r"\[(\d+), (\d+)\) \| (.*)")
SAMPLE = re.compile(r"  sample (\d+) \(rank (\d+)\): dataset (\d+) (\S+), its sample (\d+);")
HIT = re.compile(r"  sample (\d+) \(step (\d+), rank (\d+)\): (.*)")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("provenance_cli")
    rng = np.random.default_rng(1)
    prefixes = []
    for name in ("a", "b", "c"):
        prefixes.append(write_corpus(str(root / name), rng.integers(1, 2 * SEQ, 150), rng,
                                     low=1, vocab=1000))
    return root, prefixes


def _config(root: Path, prefixes, shuffle: str, packing: str) -> Path:
    return write_tool_config(root / f"{shuffle}_{packing}.py", f"""
        c.data_path = '0.5 {prefixes[0]} 0.3 {prefixes[1]} 0.2 {prefixes[2]}'
        c.split = '90,10,0'
        c.sequence_length = {SEQ}
        c.create_attention_mask = False
        c.shuffle = {shuffle!r}
        c.packing = {packing!r}
        c.train_samples, c.valid_samples = 600, 30
    """, root / "cache")


def _split(root, prefixes, shuffle, packing):
    config = mdc.GPTDataConfig(
        random_seed=1234, sequence_length=SEQ, blend=(prefixes, [0.5, 0.3, 0.2]),
        split="90,10,0", create_attention_mask=False, shuffle=shuffle, packing=packing,
        path_to_cache=str(root / "cache"),
    )
    return mdc.build_datasets(config, [600, 30, None])[0]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "inspect_data.py"), *args,
                           "--noprogress"], capture_output=True, text=True, cwd=ROOT, env=ENV,
                          timeout=300)


MODES = [(s, p) for s in ("megatron", "feistel") for p in ("concat", "best_fit")]


@pytest.mark.parametrize("shuffle,packing", MODES)
def test_batch_prints_every_segment_of_the_step(data, shuffle, packing):
    root, prefixes = data
    config = _config(root, prefixes, shuffle, packing)
    step, gbs, mbs, dp = 7, 8, 2, 2
    result = _run("batch", f"--config={config}", f"--step={step}", f"--global_batch_size={gbs}",
                  f"--micro_batch_size={mbs}", f"--data_parallel_size={dp}",
                  "--preview_tokens=3")
    assert result.returncode == 0, result.stderr
    dataset = _split(root, prefixes, shuffle, packing)
    samples, segments = [], {}
    for line in result.stdout.splitlines():
        if match := SAMPLE.match(line):
            position = int(match[1])
            samples.append((position, int(match[2]), int(match[3]), match[4], int(match[5])))
            segments[position] = []
        elif match := SEGMENT.match(line):
            lo, hi, j, prefix, d, s, e = (match[k] for k in range(1, 8))
            segments[samples[-1][0]].append((int(lo), int(hi), int(j), prefix, int(d), int(s),
                                             int(e), match[8]))
    assert [s[0] for s in samples] == list(range(step * gbs, (step + 1) * gbs))
    for position, rank, j, prefix, k in samples:
        assert rank == (position - step * gbs) % (mbs * dp) // mbs
        member, member_sample, expected = walk(dataset, position)
        assert (j, prefix, k) == (member, prefixes[member], member_sample)
        column = 0
        corpus = mdc.IndexedDataset(prefixes[j])
        assert len(segments[position]) == len(expected)
        for got, (d, s, n) in zip(segments[position], expected):
            assert got[:7] == (column, column + n, j, prefixes[j], d, s, s + n)
            shown = " ".join(str(t) for t in corpus.get(d, offset=s, length=min(n, 3)).tolist())
            assert got[7] == shown + (" ..." if n > 3 else "")
            column += n


def test_batch_of_one_rank_with_a_batch_size_schedule_and_html(data):
    root, prefixes = data
    config = _config(root, prefixes, "megatron", "best_fit")
    schedule = f"0:4 {40 * SEQ}:8"  # thresholds in tokens, as Megatron's flag
    plan = BatchSizeSchedule.parse(schedule, SEQ)
    result = _run("batch", f"--config={config}", "--step=12", f"--step_batch_size_schedule="
                  f"{schedule}", "--micro_batch_size=2", "--data_parallel_size=2",
                  "--dp_rank=1", "--html", f"--output_dir={root / 'out'}")
    assert result.returncode == 0, result.stderr
    first = plan.consumed_after(12)
    expected = [first + o for o in range(plan.global_batch_size(first)) if o % 4 >= 2]
    shown = [int(m[1]) for m in map(SAMPLE.match, result.stdout.splitlines()) if m]
    assert shown == expected
    page = (root / "out" / "train_step_12.html").read_text()
    dataset = _split(root, prefixes, "megatron", "best_fit")
    for position in expected:
        _, _, segments = walk(dataset, position)
        assert f"sample {position}: dataset" in page
        for d, s, n in segments:
            assert f"doc {d} [{s}, {s + n})" in page


@pytest.mark.parametrize("shuffle,packing", MODES)
def test_where_prints_every_sample_step_and_range(data, shuffle, packing):
    root, prefixes = data
    config = _config(root, prefixes, shuffle, packing)
    dataset = _split(root, prefixes, shuffle, packing)
    holding = samples_holding(dataset)
    gbs = 8
    for j, document in ((1, 4), (0, 17), (2, 0), (1, 140)):  # 140 lies in the valid split
        result = _run("where", f"--config={config}", f"--prefix={prefixes[j]}",
                      f"--document={document}", f"--global_batch_size={gbs}")
        assert result.returncode == 0, result.stderr
        assert f"document {document} of {prefixes[j]} (dataset {j} of the train split): in " \
               f"{len(holding.get((j, document), []))} sample(s)" in result.stdout
        hits = [m for m in map(HIT.match, result.stdout.splitlines()) if m]
        assert [int(m[1]) for m in hits] == holding.get((j, document), [])
        for match in hits:
            position = int(match[1])
            assert (int(match[2]), int(match[3])) == (position // gbs, 0)
            _, _, segments = walk(dataset, position)
            columns = np.cumsum([0] + [n for _, _, n in segments])
            ranges = [f"tokens [{s}, {s + n}) at text [{c}, {c + n})"
                      for (d, s, n), c in zip(segments, columns) if d == document]
            assert match[4] == ", ".join(ranges)


@pytest.mark.parametrize("args,message", [
    (["batch"], "--step"),
    (["batch", "--step=1000"], "split holds"),
    (["batch", "--step=0", "--global_batch_size=6", "--micro_batch_size=4"], "not divisible"),
    (["batch", "--step=0", "--data_parallel_size=2", "--dp_rank=2"], "data_parallel_rank"),
    (["batch", "--step=0", "--step_batch_size_schedule=3200:8"], "first threshold must be 0"),
    (["where", "--document=1"], "--prefix"),
    (["where", "--prefix=/nowhere", "--document=1"], "prefix: '/nowhere' is not a dataset"),
    (["where", "--prefix={a}", "--document=150"], "document: 150 is outside"),
])
def test_bad_input_is_one_line_error(data, args, message):
    root, prefixes = data
    config = _config(root, prefixes, "megatron", "concat")
    args = [arg.format(a=prefixes[0]) for arg in args]
    result = _run(*args, f"--config={config}")
    assert result.returncode == 1, result.stdout
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
