"""A config file written for 0.1 (``from data_config import base_config``, as its README
said) fails with one line that names the module where it is now,
``megadata_cli.data_config``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.mark.parametrize("tool", ["build_index.py", "inspect_data.py"])
def test_a_config_of_0_1_is_told_where_data_config_is(tmp_path, tool):
    config = tmp_path / "old.py"
    config.write_text(
        "from data_config import base_config\n\n\ndef get_config():\n    return base_config()\n"
    )
    args = ["corpus"] if tool == "inspect_data.py" else []
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / tool), *args, f"--config={config}"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=ENV,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "No module named 'data_config'" in lines[0]
    assert "megadata_cli.data_config" in lines[0]


def test_the_module_it_names_gives_the_base_config():
    from megadata_cli.data_config import base_config

    assert base_config().sequence_length > 0
