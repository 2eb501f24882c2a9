"""Run one section of docs/trainers.md as written: its ```python and ```bash blocks, in
order, each saved to a file and run in a scratch directory with this venv's python first
on PATH (the page is kept out of tests/tools/test_docs_blocks.py's chain, whose venv has
neither MaxText nor torchtitan). Imported by name: this folder is on sys.path."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "trainers.md"


def run_section(heading: str, directory: Path, env: dict[str, str] | None = None) -> list[str]:
    """The output (stdout + stderr) of each block of section ``## heading``, in order;
    fails on the first block that exits non-zero."""
    section = PAGE.read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```(python|bash)\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    assert blocks, f"no blocks under ## {heading}"
    environment = dict(os.environ if env is None else env)
    environment["PATH"] = os.pathsep.join([os.path.dirname(sys.executable),
                                           environment.get("PATH", "")])
    outputs = []
    for number, (language, code) in enumerate(blocks):
        script = directory / f"block_{number}.{'py' if language == 'python' else 'sh'}"
        script.write_text(code)
        command = ([sys.executable, script.name] if language == "python"
                   else ["bash", "-euo", "pipefail", script.name])
        done = subprocess.run(command, cwd=directory, env=environment, capture_output=True,
                              text=True, timeout=600)
        outputs.append(done.stdout + done.stderr)
        assert done.returncode == 0, f"## {heading} block {number}:\n{code}\n{outputs[-1][-6000:]}"
    return outputs
