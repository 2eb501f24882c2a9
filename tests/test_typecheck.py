"""The type check of tools/typecheck.sh really checks: mypy with the project's
configuration (pyproject.toml's [tool.mypy]) rejects a deliberately ill-typed module and
accepts its corrected twin. The whole-project check is tools/typecheck.sh, not run here."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mypy") is None,
    reason="mypy is not installed (bash tools/typecheck.sh installs it)",
)

ILL_TYPED = '''
import numpy as np


def total(values: list[int]) -> int:
    return sum(values)


def first_length(lengths: np.ndarray | None) -> int:
    return int(lengths[0])  # None is not indexable


count: int = total(["a", "b"])  # str items for list[int]
'''

WELL_TYPED = '''
import numpy as np


def total(values: list[int]) -> int:
    return sum(values)


def first_length(lengths: np.ndarray | None) -> int:
    return 0 if lengths is None else int(lengths[0])


count: int = total([1, 2])
'''


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    module = tmp_path / "typecheck_probe.py"
    module.write_text(source, encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key != "MYPYPATH"}
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", str(module)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )


def test_ill_typed_module_fails(tmp_path: Path) -> None:
    result = _mypy(tmp_path, ILL_TYPED)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[index]" in result.stdout, result.stdout
    assert "[list-item]" in result.stdout or "[arg-type]" in result.stdout, result.stdout


def test_well_typed_module_passes(tmp_path: Path) -> None:
    result = _mypy(tmp_path, WELL_TYPED)
    assert result.returncode == 0, result.stdout + result.stderr
