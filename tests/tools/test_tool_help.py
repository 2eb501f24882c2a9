"""Every absl program answers --help with its usage and exit status 0: the console scripts
(from any directory) and a checkout's ``python tools/X.py``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "tools" / "cli"
#: The checkout's scripts whose program defines absl flags (tools/X.py runs megadata_cli.X).
TOOLS = sorted(
    path.name
    for path in (ROOT / "tools").glob("*.py")
    if path.name == "bench.py" or (
        (CLI / path.name).exists()
        and re.search(r"\bDEFINE_\w+\(", (CLI / path.name).read_text())
    )
)
#: The console scripts (pyproject's [project.scripts]) and the module each runs.
SCRIPTS = dict(
    re.findall(
        r'^(megadata-[\w-]+) = "([\w.]+):cli"$',
        (ROOT / "pyproject.toml").read_text().split("[project.scripts]")[1].split("\n[")[0],
        re.MULTILINE,
    )
)


def _help(tool: str, flag: str = "--help") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / tool), flag],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def test_the_flag_defining_tools_are_found():
    assert {"build_index.py", "demo.py", "bench.py", "preprocess_data.py"} <= set(TOOLS)


@pytest.mark.parametrize("tool", TOOLS)
def test_help_exits_0_with_usage(tool):
    result = _help(tool)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"tools/{tool}:" in result.stdout  # the flags section of this program
    assert "--helpfull" in result.stdout


@pytest.mark.parametrize("flag", ["--helpfull", "--helpshort", "-?"])
def test_other_help_flags_exit_0(flag):
    result = _help("merge_datasets.py", flag)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "--output_prefix" in result.stdout


def test_a_bad_flag_with_help_still_fails():
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "demo.py"), "--workers=0", "--help"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 1 and "--workers=0" in result.stderr


def test_build_index_help_keeps_the_example_lines():
    lines = _help("build_index.py").stdout.splitlines()
    first = "    megadata-build-index --config=weighted_blend \\"
    assert first in lines
    assert lines[lines.index(first) + 1] == "        --config.sequence_length=2048 [--dry_run]"


def test_bench_help_lists_every_suite():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from bench import SUITES
    finally:
        sys.path.remove(str(ROOT / "tools"))
    out = _help("bench.py").stdout
    for name in SUITES:
        assert re.search(rf"^    {name}\s+\S", out, re.MULTILINE), name


def test_every_console_script_is_installed():
    assert set(SCRIPTS) == {
        "megadata-preprocess", "megadata-preprocess-fast", "megadata-build-index",
        "megadata-inspect", "megadata-merge", "megadata-megatron", "megadata-demo",
    }
    for name in SCRIPTS:
        assert (Path(sys.executable).parent / name).exists(), name


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_console_script_answers_h_from_any_directory(script, tmp_path):
    result = subprocess.run(
        [str(Path(sys.executable).parent / script), "-h"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # absl programs print their docstring and flags; the Megatron launcher its usage line
    assert "--helpfull" in result.stdout or "usage: megadata-" in result.stdout, result.stdout
    assert not list(tmp_path.iterdir())  # help writes nothing
