"""tools/bench.py chat runs end to end at a tiny scale: its rows printed, its checks
(same tokens and trained positions as transformers, padding <= FFD) passed, its scratch
removed; and the FFD peer packs as first-fit decreasing does (no timing asserts)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_bench_chat_smoke(tmp_path):
    pytest.importorskip("tokenizers")
    pytest.importorskip("jinja2")
    pytest.importorskip("transformers")
    process = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench.py"), "chat", "--scale", "0.01",
         "--repeats", "1", "--workdir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    out = process.stdout
    assert process.returncode == 0, out + process.stderr
    assert "suite chat: scale 0.01" in out and ": NO" not in out
    for row in ("ours 1 worker (peer = transformers apply_chat_template loop) (MB/s)",
                "ours 2 workers (peer = transformers apply_chat_template loop) (MB/s)",
                "ours 1 worker, CPU time (peer = transformers loop) (s)",
                "S = 4096 (peer = first-fit decreasing) (%)",
                "S = 8192 (peer = the lower bound) (%)"):
        assert row in out, f"missing row {row!r}:\n{out}"
    checks = [line for line in out.splitlines() if line.startswith("check ")]
    for check in ("preprocess: ours 1 worker's tokens == the transformers loop's",
                  "preprocess: ours 2 workers's trained positions (ASSISTANT, END_OF_TURN) "
                  "== transformers' assistant masks",
                  "sampled conversations: ours' ids == transformers' chatml",
                  "padding, S = 8192: ours <= first-fit decreasing's"):
        assert [line for line in checks if check in line and ": yes" in line], check
    assert os.listdir(tmp_path) == [], "the scratch directory was not cleaned up"


def test_first_fit_decreasing_packs_as_the_rule_says():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from bench.chat import cut_pieces, first_fit_decreasing
    finally:
        sys.path.remove(str(ROOT / "tools"))
    lengths = np.array([3, 25, 6, 5, 4, 4, 10], dtype=np.int64)
    order = np.arange(len(lengths))
    # 25 = 10 + 10 + 5; decreasing: 6 5 5 4 4 3 into bins of 10: [6 4] [5 5] [4 3]
    assert cut_pieces(lengths, order, 10).tolist() == [3, 10, 10, 5, 6, 5, 4, 4, 10]
    assert first_fit_decreasing(lengths, order, 10) == 3 + 3
    # first fit, not best fit: 7 goes to the first bin with room (6 free), not the
    # tightest; decreasing 7 4 3 3 2 1 into 10: [7 3] [4 3 2 1]
    assert first_fit_decreasing(np.array([4, 3, 7, 2, 3, 1]), np.arange(6), 10) == 2
