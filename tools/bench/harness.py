"""The benchmark harness every suite shares: the report (:class:`Bench`, :class:`Row`,
the table) and helpers that measure, compare and set up corpora."""

from __future__ import annotations

import filecmp
import gc
import importlib.metadata
import json
import os
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from bench.peers import quiet_import

PEER = "megatron"


# -- the table ------------------------------------------------------------------


@dataclass
class Row:
    metric: str
    unit: str
    better: str  # "lower" or "higher"
    ours: float | None
    theirs: float | str | None  # a str: why the peer has no figure ("fails: ...")
    runs: int

    def ratio(self) -> float | None:
        if self.ours is None or not isinstance(self.theirs, (int, float)) or self.theirs == 0:
            return None
        return self.ours / self.theirs


@dataclass
class Bench:
    """What a suite gets: sizes, repeats, a scratch directory, and the report."""

    repeats: int
    scale: float
    workdir: str
    workers: int
    seed: int
    only: list[str]
    #: The peer's column in the table (a suite whose peer is not megatron-core sets it).
    peer: str = PEER
    rows: list[Row] = field(default_factory=list)
    checks: list[tuple[str, bool | None, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def scaled(self, size: int, minimum: int = 1) -> int:
        return max(minimum, int(round(size * self.scale)))

    def wants(self, item: str) -> bool:
        return not self.only or item in self.only

    def path(self, *parts: str) -> str:
        path = os.path.join(self.workdir, *parts)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return path

    def row(self, metric, unit, better, ours, theirs, runs) -> None:
        self.rows.append(Row(metric, unit, better, ours, theirs, runs))

    def check(self, what: str, ok: bool | None, detail: str = "") -> None:
        self.checks.append((what, ok, detail))

    def note(self, text: str) -> None:
        self.notes.append(text)


class ChildFailedError(RuntimeError):
    """A measuring child process printed no ``RESULT {json}`` line."""


def child_result(command: list[str], what: str, env: dict | None = None) -> dict:
    """Run a measuring child (a fresh interpreter) and return the json of its
    ``RESULT {json}`` line; :class:`ChildFailedError` with its stderr's tail otherwise."""
    process = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})},
    )
    for line in process.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise ChildFailedError(
        f"{what} failed with status {process.returncode}:\n{process.stderr[-4000:]}"
    )


def progress(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


def _fmt(value: float | str | None) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, str):
        return value
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.3f}"
    return f"{value:.3g}"


def render_table(rows: list[Row], peer: str = PEER) -> str:
    header = ("metric", "ours", peer, f"ours/{peer}", "better", "runs")
    lines = [header]
    for row in rows:
        ratio = row.ratio()
        lines.append(
            (
                f"{row.metric} ({row.unit})",
                _fmt(row.ours),
                _fmt(row.theirs),
                "n/a" if ratio is None else f"{ratio:.3f}",
                f"{row.better} is better",
                str(row.runs),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for number, line in enumerate(lines):
        cells = [line[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(line[1:], widths[1:])]
        out.append("  ".join(cells))
        if number == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


# -- helpers shared by suites ---------------------------------------------------


def median_of(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def measure(function: Callable[[], object]) -> tuple[float, object]:
    """(seconds, result) of one call; garbage is collected first so both sides start clean."""
    gc.collect()
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def timed(function: Callable[[], object]) -> float:
    """Seconds one call takes."""
    return measure(function)[0]


def import_megatron_indexed():
    """megatron-core's indexed_dataset module, or None when it is not installed."""
    modules = quiet_import("megatron.core.datasets.indexed_dataset")
    return None if modules is None else modules[0]


def version_of(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def same_files(*pairs: tuple[str, str]) -> bool:
    return all(filecmp.cmp(a, b, shallow=False) for a, b in pairs)


def same_corpus(prefix_a: str, prefix_b: str) -> bool:
    return same_files(
        (prefix_a + ".bin", prefix_b + ".bin"), (prefix_a + ".idx", prefix_b + ".idx")
    )


def remove_corpus(*prefixes: str) -> None:
    for prefix in prefixes:
        for suffix in (".bin", ".idx"):
            try:
                os.remove(prefix + suffix)
            except FileNotFoundError:
                pass


def write_raw_corpus(prefix: str, tokens: np.ndarray, lengths: np.ndarray, boundaries) -> None:
    """A MMIDIDX v1 pair written straight from arrays (uint16), used to set up inputs."""
    lengths = np.asarray(lengths, dtype=np.int32)
    pointers = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        np.cumsum(lengths[:-1].astype(np.int64) * 2, out=pointers[1:])
    boundaries = np.asarray(boundaries, dtype=np.int64)
    with open(prefix + ".bin", "wb") as stream:
        stream.write(np.ascontiguousarray(tokens, dtype=np.uint16).tobytes())
    with open(prefix + ".idx", "wb") as stream:
        stream.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(lengths), len(boundaries)))
        stream.write(lengths.tobytes())
        stream.write(pointers.tobytes())
        stream.write(boundaries.tobytes())


def side_by_side(
    bench: Bench, item: str, repeats: int, ours, theirs
) -> tuple[list, list, bool | None]:
    """Run ``ours(prefix)`` and ``theirs(prefix)`` (None: peer missing) ``repeats`` times.

    The order alternates between repeats. Each returns a measurement; the corpora they
    write are compared once (byte for byte) and removed after every repeat.
    """
    results = {"ours": [], "theirs": []}
    identical = None
    for repeat in range(repeats):
        prefixes = {side: bench.path(item, side) for side in results}
        order = ["ours", "theirs"] if repeat % 2 == 0 else ["theirs", "ours"]
        for side in order:
            run = ours if side == "ours" else theirs
            if run is not None:
                results[side].append(run(prefixes[side]))
        if ours is not None and theirs is not None and identical is None:
            identical = same_corpus(prefixes["ours"], prefixes["theirs"])
        remove_corpus(*prefixes.values())
    return results["ours"], results["theirs"], identical
