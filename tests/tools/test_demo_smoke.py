"""The demo runs end to end on a small slice of the standard-library corpus."""

from __future__ import annotations

import os
import re
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
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # this checkout's packages
    )
    assert result.returncode == 0, result.stderr
    assert "[4/4]" in result.stdout and "samples/s" in result.stdout
    assert "packed best_fit + document_masking" in result.stdout, result.stdout
    assert "segment_ids (value x run) 1x" in result.stdout, result.stdout
    corpus = mdc.IndexedDataset(str(tmp_path / "stdlib_text_document"))
    assert len(corpus) == 40 and corpus.num_documents == 40
    assert all(int(corpus[i][-1]) == 256 for i in range(len(corpus)))  # EOD appended
    _check_phase_times(result.stdout, tmp_path)


def _check_phase_times(out: str, workdir: Path) -> None:
    """Building each corpus and tokenizing it are timed apart, and the tokenizing rate is
    the JSON-lines size over the tokenizing time (not over both phases)."""
    for name in ("stdlib", "stdlib_docs"):
        built = re.search(rf"{name}: \d+ documents .* written in (\d+\.\d+) s", out)
        tokenized = re.search(
            rf"{name}: .*\n\s+tokenized in (\d+\.\d+) s \((\d+\.\d+) MB/s", out
        )
        assert built and tokenized, out
        seconds, rate = float(tokenized[1]), float(tokenized[2])
        megabytes = (workdir / f"{name}.jsonl").stat().st_size / 1e6
        slack = 0.05 * seconds + 0.005 * rate + 1e-3  # the printed roundings
        assert abs(rate * seconds - megabytes) <= slack, (name, rate, seconds, megabytes)
    for phase in ("indices built into", "first batch after", "restore and 3 batches:", "done in"):
        assert phase in out, phase
