"""A native block encoder's workers are threads of one process (no process started, the
same bytes as one worker and as a process pool), and a plain input's mapped pages are
released behind the blocks read: peak resident memory does not grow with the input."""

from __future__ import annotations

import functools
import glob
import json
import os
import subprocess
import sys
import threading
import time

import pytest
import tokenizer_files as files
from preprocess_helpers import files_of

from megadata_adapters.tokenizing.text_tokenizers import load_tokenizer
from megadata_core.preprocess import preprocess_jsonl

pytest.importorskip("gigatoken", reason="the native block encoder is gigatoken's")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_WORDS = ["the", " cat", " sat", " on", " mat", " Zürich", " 東京", " 😀", "\n", "  ", "123"]


@pytest.fixture(scope="module")
def hf_directory(tmp_path_factory):
    return files.write_hf_directory(str(tmp_path_factory.mktemp("tok")))


def _factory(directory: str, encoder: str = "auto"):
    return functools.partial(load_tokenizer, "HuggingFaceTokenizer", encoder=encoder,
                             tokenizer_model=directory)


def _lines(count: int, seed: int = 0) -> bytes:
    """``count`` JSON lines of varied text (deterministic)."""
    out = []
    state = seed
    for i in range(count):
        words = []
        for _ in range(20 + i % 37):
            state = (state * 1103515245 + 12345) & 0x7FFFFFFF
            words.append(_WORDS[state % len(_WORDS)])
        out.append((json.dumps({"text": f"doc {i}" + "".join(words)}) + "\n").encode())
    return b"".join(out)


class _Children:
    """Every child process of this one seen while it runs (each thread's
    /proc/self/task/TID/children, polled every 2 ms)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while True:
            for path in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
                try:
                    with open(path) as stream:
                        self.seen.update(stream.read().split())
                except OSError:
                    pass
            if self._stop.wait(0.002):
                return

    def __enter__(self) -> _Children:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.skipif(not glob.glob("/proc/self/task/*/children"),
                    reason="needs /proc/PID/task/TID/children (Linux)")
def test_two_native_workers_are_threads_of_this_process(tmp_path, hf_directory):
    source = str(tmp_path / "in.jsonl")
    with open(source, "wb") as stream:
        stream.write(_lines(3000))
    run = functools.partial(preprocess_jsonl, [source], append_eod=True, chunk_bytes=8192)
    one = files_of(run(str(tmp_path / "one"), _factory(hf_directory), workers=1)
                   .output_prefixes["text"])
    before = _Children()
    with before:
        pass
    with _Children() as native:
        summary = run(str(tmp_path / "two"), _factory(hf_directory), workers=2)
    assert summary.documents == 3000
    assert native.seen <= before.seen, "2 workers with a native encoder started a process"
    assert files_of(summary.output_prefixes["text"]) == one
    # the reference encoder (no block encoder) keeps its process pool: the watch sees it
    with _Children() as pooled:
        reference = run(str(tmp_path / "ref"), _factory(hf_directory, "reference"), workers=2)
    assert pooled.seen - before.seen, "the reference encoder's 2 workers started no process"
    assert files_of(reference.output_prefixes["text"]) == one


_CHILD = """
import functools, json, sys
from megadata_adapters.tokenizing.text_tokenizers import load_tokenizer
from megadata_core.preprocess import preprocess_jsonl
source, prefix, workers, directory = sys.argv[1:5]
factory = functools.partial(load_tokenizer, "HuggingFaceTokenizer", tokenizer_model=directory)
summary = preprocess_jsonl([source], prefix, factory, append_eod=True, workers=int(workers))
with open("/proc/self/status") as stream:
    status = dict(line.split(":", 1) for line in stream)
print(json.dumps({"documents": summary.documents,
                  **{key: int(status[key].split()[0]) << 10 for key in ("VmHWM", "RssFile")}}))
"""


def _peak_rss(source: str, prefix: str, workers: int, directory: str) -> dict:
    """The child's VmHWM, and its peak RssAnon + RssFile polled every 0.05 s (bytes)."""
    child = subprocess.Popen([sys.executable, "-c", _CHILD, source, prefix, str(workers),
                              directory], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    peak = 0
    while child.poll() is None:
        try:
            with open(f"/proc/{child.pid}/status") as stream:
                fields = dict(line.split(":", 1) for line in stream)
            peak = max(peak, sum(int(fields[key].split()[0]) << 10
                                 for key in ("RssAnon", "RssFile")))
        except (OSError, KeyError, ValueError):  # (ending: its status is gone or partial)
            pass
        time.sleep(0.05)
    out, _ = child.communicate()
    assert child.returncode == 0
    return {**json.loads(out.strip().splitlines()[-1]), "polled": peak}


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc (Linux)")
@pytest.mark.parametrize("workers", [1, 2])
def test_peak_rss_does_not_grow_with_the_input(tmp_path, hf_directory, workers):
    """Inputs of 32 and 128 MB: the larger one's peak (anonymous + file-backed) stays
    within 48 MB of the smaller one's and under 512 MB (before the mapped pages were
    released behind the blocks, the whole file stayed resident: +96 MB here)."""
    block = _lines(4000, seed=workers)
    peaks = {}
    for megabytes in (32, 128):
        source = str(tmp_path / f"in-{megabytes}.jsonl")
        with open(source, "wb") as stream:
            for _ in range(-(-(megabytes << 20) // len(block))):
                stream.write(block)
        peaks[megabytes] = _peak_rss(source, str(tmp_path / f"out-{megabytes}"), workers,
                                     hf_directory)
        os.remove(source)
    small, large = peaks[32], peaks[128]
    for key in ("VmHWM", "polled"):
        assert large[key] < small[key] + (48 << 20), (key, peaks)
        assert large[key] < 512 << 20, (key, peaks)
