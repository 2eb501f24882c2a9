"""Mistakes on a tool's command line are one ``error:`` line (exit 1) that names the
mistake and the closest valid name: misspelled flags, misspelled config fields (in the
file and as ``--config.x`` overrides), configs that do not load, corpus prefixes given as
``x.bin`` / ``x.idx`` / the ``--output_prefix`` name; ``-h`` is help; the demo refuses bad
flags before it writes anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import megadata_core as mdc

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tools")])}

#: (tool, a misspelled flag, the flag it means)
TYPOS = [
    ("build_index.py", "--dry_rnu", "--dry_run"),
    ("inspect_data.py", "--output_dri=x", "--output_dir"),
    ("preprocess_data.py", "--output_prefx=x", "--output_prefix"),
    ("merge_datasets.py", "--inptu=x", "--input"),
    ("demo.py", "--max_documnets=5", "--max_documents"),
    ("make_demo_corpus.py", "--max_byts=5", "--max_bytes"),
    ("bench.py", "--repeat=1", "--repeats"),
]


def _tool(tool: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / tool), *args],
        capture_output=True, text=True, timeout=300, cwd=cwd, env=ENV,
    )


def _error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_every_flag_defining_tool_is_covered(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    from test_tool_help import TOOLS

    assert {tool for tool, _, _ in TYPOS} == set(TOOLS)


@pytest.mark.parametrize(("tool", "typo", "meant"), TYPOS)
def test_a_misspelled_flag_names_the_closest_one(tool, typo, meant):
    line = _error_line(_tool(tool, typo))
    assert line == f"error: {typo.split('=')[0]}: unknown flag; did you mean {meant}?"


@pytest.mark.parametrize("tool", ["build_index.py", "preprocess_data.py"])
def test_dash_h_is_help(tool):
    result = _tool(tool, "-h")
    assert result.returncode == 0, result.stderr
    assert f"tools/{tool}:" in result.stdout and "--helpfull" in result.stdout


def test_a_flag_value_out_of_range_is_one_line():
    assert _error_line(_tool("build_index.py", "--train_samples=x")) == (
        "error: flag --train_samples=x: invalid literal for int() with base 10: 'x'"
    )


# -- configs ----------------------------------------------------------------------------------


def _config_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "typo_config.py"
    path.write_text(
        "import sys\n"
        "from megadata_cli.data_config import base_config\n\n"
        "def get_config():\n"
        "    config = base_config()\n"
        "    config.data_path = 'corpus_text_document'\n"
        f"    {body}\n"
        "    return config\n"
    )
    return path


@pytest.mark.parametrize("tool", [["build_index.py", "--dry_run"], ["inspect_data.py", "config"]])
def test_a_misspelled_field_in_a_config_file(tmp_path, tool):
    config = _config_file(tmp_path, "config.sequence_lenght = 128")
    line = _error_line(_tool(*tool, f"--config={config}"))
    assert line == (
        "error: config.sequence_lenght: no such data config field; did you mean "
        "config.sequence_length?"
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("--config.sequence_lenght=128", "--config.sequence_lenght: no such config field; "
                                         "did you mean --config.sequence_length?"),
        ("--config.blend_ordr=megatron", "--config.blend_ordr: no such config field; did you "
                                         "mean --config.blend_order?"),
        ("--config.data_path.x=1", "--config.data_path.x: no such config field; did you mean "
                                   "--config.data_path?"),
    ],
)
def test_a_misspelled_config_override(override, message):
    line = _error_line(_tool("build_index.py", "--config=configs/single_corpus.py", override))
    assert line == f"error: {message}"


def test_a_config_that_does_not_load(tmp_path):
    line = _error_line(_tool("build_index.py", f"--config={tmp_path}/nope.py", "--dry_run"))
    assert line.startswith(f"error: --config={tmp_path}/nope.py: cannot load the config (")
    assert "No such file or directory" in line


def test_config_fields_unit(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    from megadata_cli.data_config import base_config, to_gpt_config

    config = base_config()
    config.data_path = "x"
    config.eod_idd = 3
    with pytest.raises(mdc.DataError, match=r"config\.eod_idd: .* did you mean config\.eod_id\?"):
        to_gpt_config(config)
    config = base_config()
    config.zzz = 1
    with pytest.raises(mdc.DataError, match=r"config\.zzz: no such data config field$"):
        to_gpt_config(config)


# -- prefixes ---------------------------------------------------------------------------------


@pytest.fixture
def written(tmp_path):
    """``out/x_text_document`` as preprocessing writes it for ``--output_prefix out/x``."""
    (tmp_path / "out").mkdir()
    with mdc.IndexedDatasetWriter(str(tmp_path / "out" / "x_text_document")) as writer:
        writer.add_document(np.arange(10), lengths=[10])
    return tmp_path


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("out/x_text_document.bin", "a prefix names the .bin/.idx pair without the suffix"),
        ("out/x_text_document.idx", "a prefix names the .bin/.idx pair without the suffix"),
        ("out/x", "preprocessing writes {output_prefix}_{key}_document"),
        ("out/x.idx", "a prefix names the .bin/.idx pair without the suffix"),
    ],
)
def test_a_wrong_prefix_suggests_the_corpus(written, given, why):
    with pytest.raises(mdc.DataError) as raised:
        mdc.IndexedDataset(str(written / given))
    assert str(raised.value).endswith(
        f".idx file not found; did you mean prefix '{written}/out/x_text_document'? ({why})"
    )


def test_no_suggestion_without_a_corpus(written):
    with pytest.raises(mdc.DataError, match=r"\.idx file not found$"):
        mdc.IndexedDataset(str(written / "out" / "y"))


def test_the_tools_suggest_the_prefix(written):
    line = _error_line(_tool("inspect_data.py", "corpus", "out/x.bin", cwd=written))
    assert line.endswith("did you mean prefix 'out/x_text_document'? (a prefix names the "
                         ".bin/.idx pair without the suffix)")
    result = _tool(
        "build_index.py", f"--config={ROOT}/configs/single_corpus.py", "--data_path=out/x",
        "--dry_run", cwd=written,
    )
    assert _error_line(result) == (
        "error: out/x.idx: .idx file not found; did you mean prefix 'out/x_text_document'? "
        "(preprocessing writes {output_prefix}_{key}_document)"
    )


# -- the demo ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flag", ["--sequence_length=0", "--train_samples=0", "--batches=1", "--max_documents=0"]
)
def test_demo_rejects_bad_flags_before_writing(tmp_path, flag):
    workdir = tmp_path / "demo"
    line = _error_line(_tool("demo.py", f"--workdir={workdir}", flag))
    assert line.startswith(f"error: flag {flag}: ")
    assert not workdir.exists()
