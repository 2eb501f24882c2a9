"""tools/build_index.py and the configs: plan, build, table, and one-line errors."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from corpora import write_corpus

import megadata_core as mdc

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from megadata_cli.data_config import to_gpt_config  # noqa: E402


@pytest.fixture()
def corpora(tmp_path):
    rng = np.random.default_rng(0)
    for name in "ab":
        write_corpus(str(tmp_path / name), rng.integers(5, 200, 300), rng, low=1, vocab=1000,
                     eod=0)
    config = tmp_path / "config.py"
    config.write_text(
        "import sys\n"
        "from megadata_cli.data_config import base_config\n\n"
        "def get_config():\n"
        "    c = base_config()\n"
        f"    c.data_path = '0.7 {tmp_path / 'a'} 0.3 {tmp_path / 'b'}'\n"
        "    c.split = '90,8,2'\n"
        "    c.sequence_length = 64\n"
        "    c.eod_id = 0\n"
        f"    c.path_to_cache = {str(tmp_path / 'cache')!r}\n"
        "    c.train_samples, c.valid_samples, c.test_samples = 2000, 100, 50\n"
        "    return c\n"
    )
    return tmp_path, config


def _run(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "tools" / "build_index.py"), "--noprogress", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's megadata_core
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)


def test_dry_run_prints_the_plan_and_builds_nothing(corpora):
    root, config = corpora
    result = _run(f"--config={config}", "--dry_run")
    assert result.returncode == 0, result.stderr
    assert "train: 2,000 samples requested, 2,000 built, a blend of 2" in result.stdout
    assert " 0.7000       1,407 " in result.stdout  # ceil(ceil(2000*0.7)*1.005) requested
    assert "requested: samples asked of a dataset" in result.stdout
    assert not (root / "cache").exists()


def _table(stdout: str) -> list[str]:
    """The tables of a run: everything after the first line, without the blend shares
    that only a build knows."""
    lines = stdout.splitlines()[1:]
    return [line for line in lines if not line.startswith("  realized shares")]


@pytest.mark.parametrize(
    "flags",
    [
        [],  # weighted blend with split
        ["--config.sequence_length=32", "--split=60,30,10"],
        ["--data_path={root}/a {root}/b", "--split=90,8,2"],  # unweighted: one epoch each
        ["--data_path={root}/a", "--split=90,8,2"],  # single prefix: whole epochs
        ["--config.drop_last_partial_validation_sequence=False",
         "--config.add_extra_token_to_sequence=False"],
        ["--train_data_path=0.6 {root}/a 0.4 {root}/b",
         "--valid_data_path={root}/a {root}/b", "--config.multiple_validation_sets=True"],
        ["--config.packing=best_fit", "--config.document_masking=True"],  # packed bins
        ["--config.packing=best_fit", "--data_path={root}/a", "--split=90,8,2",
         "--config.add_extra_token_to_sequence=False", "--config.shuffle=feistel"],
    ],
)
def test_dry_run_prints_the_real_runs_tables(corpora, flags):
    root, config = corpora
    flags = [flag.format(root=root) for flag in flags]
    dry = _run(f"--config={config}", "--dry_run", *flags)
    assert dry.returncode == 0, dry.stderr
    real = _run(f"--config={config}", *flags)
    assert real.returncode == 0, real.stderr
    assert _table(dry.stdout) == _table(real.stdout)
    assert ("realized shares" in real.stdout) == ("a blend of" in real.stdout)
    packed = "--config.packing=best_fit" in flags
    assert ("best-fit-decreasingpacks" in "".join(real.stdout.split())) == packed


def test_table_labels_requested_and_built(corpora):
    root, config = corpora
    result = _run(f"--config={config}", f"--data_path={root / 'a'}", "--split=90,8,2")
    assert result.returncode == 0, result.stderr
    header = next(line for line in result.stdout.splitlines() if line.startswith("train:"))
    assert header.startswith("train: 2,000 samples requested, ")
    built = int(header.split(", ")[1].split()[0].replace(",", ""))
    assert built > 2000  # whole epochs
    columns = result.stdout.splitlines()[3].split()
    assert columns == ["prefix", "documents", "weight", "requested", "built", "epochs", "tokens"]
    assert "built: a dataset holds whole epochs" in result.stdout


def test_build_fills_the_cache_and_prints_tables(corpora):
    root, config = corpora
    result = _run(f"--config={config}", "--config.sequence_length=32")
    assert result.returncode == 0, result.stderr
    for split in ("train: 2,000 samples", "valid: 100 samples", "test: 50 samples"):
        assert split in result.stdout
    assert "realized shares" in result.stdout and "0.7000" in result.stdout
    assert any(name.endswith(".npy") for name in (p.name for p in (root / "cache").iterdir()))
    again = _run(f"--config={config}", "--config.sequence_length=32")
    assert again.stdout.split("\n", 1)[1] == result.stdout.split("\n", 1)[1]


def test_megatron_flags_override_the_blend(corpora):
    root, config = corpora
    result = _run(f"--config={config}", f"--data_path={root / 'b'}", "--split=1", "--dry_run")
    assert result.returncode == 0, result.stderr
    assert "train: 2,000 samples requested" in result.stdout and "from 1 dataset" in result.stdout
    assert str(root / "a") not in result.stdout


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--split=1,2,3,4", "split: '1,2,3,4'"),
        ("--split=0,0,0", "split"),
        ("--data_path=0.5 {root}/a 0.5 {root}/missing", "missing"),
        ("--data_path=-1 {root}/a 2 {root}/b", "weights"),
    ],
)
def test_bad_config_is_one_line_and_exit_1(corpora, flag, message):
    root, config = corpora
    result = _run(f"--config={config}", flag.format(root=root))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("name", ["single_corpus", "weighted_blend", "blend_per_split", "demo"])
def test_shipped_configs_convert(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "configs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config, sizes, extras = to_gpt_config(module.get_config())
    assert isinstance(config, mdc.GPTDataConfig) and len(sizes) == 3
    assert (config.blend is None) != (config.blend_per_split is None)
    assert extras["mock"] is False


def test_split_alone_splits_the_configs_own_blend(corpora):
    root, config = corpora
    result = _run(f"--config={config}", "--split=60,40,0", "--dry_run")
    assert result.returncode == 0, result.stderr
    assert str(root / "a")[-40:] in result.stdout and "test: not built" in result.stdout


def test_a_config_without_data_is_one_line(corpora):
    root, config = corpora
    result = _run(f"--config={config}", "--config.data_path=", "--dry_run")
    assert result.returncode == 1
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr


def test_blend_schedule_dry_run_matches_the_build(corpora):
    """--blend_schedule replaces the config's blend: the dry run's table (from the .idx
    files) asks each dataset for what the build's stages read of it, and builds as many
    one-epoch passes as that takes."""
    root, config = corpora
    schedule = f"0: 0.9 {root / 'a'} 0.1 {root / 'b'}; 64K: 0.2 {root / 'a'} 0.8 {root / 'b'}"
    dry = _run(f"--config={config}", "--dry_run", f"--blend_schedule={schedule}")
    built = _run(f"--config={config}", f"--blend_schedule={schedule}")
    assert dry.returncode == 0 and built.returncode == 0, dry.stderr + built.stderr
    gpt = mdc.GPTDataConfig(random_seed=1234, sequence_length=64, split="90,8,2", eod_id=0,
                            blend_schedule=schedule)
    train = mdc.build_datasets(gpt, [2000, 100, 50])[0]
    counts = np.bincount(np.asarray(train.dataset_index), minlength=2)
    for out in (dry.stdout, built.stdout):
        assert "train: 2,000 samples requested, 2,000 built, a blend schedule of 2" in out
        for member, count in zip(train.datasets, counts.tolist()):
            row = next(line for line in out.split("valid:")[0].splitlines()
                       if member.indexed.path_prefix[-40:] in line)
            assert f" {count:,} " in row and f" {len(member):,} " in row


def test_a_raw_member_is_planned_and_built_with_what_is_known_of_it(tmp_path):
    from raw_shards_helpers import write_shards

    shards = write_shards(tmp_path, counts=(200, 200))
    rng = np.random.default_rng(1)
    write_corpus(str(tmp_path / "a"), rng.integers(5, 200, 300), rng, low=1, vocab=256, eod=256)
    raw = {"raw": shards, "tokenizer": {"type": "bytes"}, "window": 2, "piece_size": 8192}
    blend = f"([{raw!r}, {str(tmp_path / 'a')!r}], [0.5, 0.5])"
    config = tmp_path / "config.py"
    config.write_text(
        "from megadata_cli.data_config import base_config\n\n"
        "def get_config():\n"
        "    c = base_config()\n"
        f"    c.blend = {blend}\n"
        "    c.split = '90,10,0'\n    c.sequence_length = 64\n    c.eod_id = 256\n"
        f"    c.path_to_cache = {str(tmp_path / 'cache')!r}\n"
        "    c.train_samples, c.valid_samples = 300, 20\n"
        "    return c\n"
    )
    for flags in (["--dry_run"], []):
        result = _run(f"--config={config}", *flags)
        assert result.returncode == 0, result.stderr
        row = next(line for line in result.stdout.splitlines() if "and 1 more" in line)
        assert row.split()[-6:] == ["?", "0.5000", "151", "151", "?", "?"]
        assert "are known once its shards are tokenized" in \
            result.stdout.replace("\n  ", " ")
