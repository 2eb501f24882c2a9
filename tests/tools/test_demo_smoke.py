"""The demo runs end to end on a small slice of the standard-library corpus."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import megadata_core as mdc

ROOT = Path(__file__).resolve().parents[2]


def test_demo_runs(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "demo.py"),
            "--workdir",
            str(tmp_path),
            "--max_documents",
            "40",
            "--batches",
            "5",
            "--sequence_length",
            "128",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert "[4/4]" in result.stdout and "samples/s" in result.stdout
    corpus = mdc.IndexedDataset(str(tmp_path / "stdlib_text_document"))
    assert len(corpus) == 40 and corpus.num_documents == 40
    assert all(int(corpus[i][-1]) == 256 for i in range(len(corpus)))  # EOD appended
