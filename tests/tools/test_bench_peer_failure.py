"""A bench peer that runs out of descriptors is reported as a row, not a crash."""

from __future__ import annotations

import errno
import resource
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from bench.builder import out_of_files  # noqa: E402
from bench.harness import Row, render_table  # noqa: E402


def test_out_of_files_is_found_through_causes():
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    try:
        try:
            raise OSError(errno.EMFILE, "Too many open files", "/data/corpus.bin")
        except OSError as inner:
            raise RuntimeError("building dataset 4711 failed") from inner
    except RuntimeError as error:
        assert out_of_files(error) == f"fails: Too many open files at ulimit {soft}"
    assert out_of_files(ValueError("bad weights")) is None
    assert out_of_files(OSError(errno.ENOENT, "missing")) is None


def test_a_failed_peer_prints_its_reason_and_no_ratio():
    row = Row("cold (s)", "s", "lower", 1.5, "fails: Too many open files at ulimit 20000", 1)
    assert row.ratio() is None
    table = render_table([row])
    assert "fails: Too many open files at ulimit 20000" in table
    assert table.splitlines()[-1].split()[-5] == "n/a"  # the ratio column


def test_olmo_overlay_that_cannot_install_is_a_reason_and_leaves_nothing(tmp_path, monkeypatch):
    from bench import olmo

    monkeypatch.setenv("MEGADATA_BENCH_CACHE", str(tmp_path))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # offline: pip must fail, not hang
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-wheels"))
    python, reason = olmo.overlay_python(create=False)
    assert python is None and "does not exist" in reason
    python, reason = olmo.overlay_python(create=True)
    assert python is None
    assert reason.startswith(f"pip install {olmo.OLMO_CORE} failed: "), reason
    assert list(tmp_path.iterdir()) == [], "a half-built overlay was left in the cache"


def test_levanter_overlay_that_cannot_install_is_a_reason_and_leaves_nothing(
    tmp_path, monkeypatch
):
    from bench import levanter_side

    monkeypatch.setenv("MEGADATA_BENCH_CACHE", str(tmp_path))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # offline: pip must fail, not hang
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-wheels"))
    python, reason = levanter_side.overlay_python(create=False)
    assert python is None and "does not exist" in reason
    python, reason = levanter_side.overlay_python(create=True)
    assert python is None
    assert reason.startswith(f"pip install {levanter_side.LEVANTER} failed: "), reason
    assert list(tmp_path.iterdir()) == [], "a half-built overlay was left in the cache"


def test_levanter_block_size_is_its_default_or_fits_twice():
    from bench.levanter_side import DEFAULT_BLOCK, block_size

    assert block_size(6000) == DEFAULT_BLOCK == 2048
    assert block_size(4096) == 2048
    assert block_size(4095) == 1024
    assert block_size(60) == 16
