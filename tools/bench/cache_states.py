"""The index cache's verification states, for the benches that time cache hits.

A cache hit checks the CRC-32 of every byte of a file once per file identity, then the
entry's verified-files list vouches for it (megadata_core.cache.entries). The benches
time three states of the same entry, each as a fresh process would meet it (this
process's memory of checked files cleared):

* ``checked``: no verified-files list (the first start after a build): every byte read;
* ``vouched``: the list vouches for every file (a restart on unchanged files);
* ``unverified``: the check switched off (sizes, shapes and dtypes only): the floor.
"""

from __future__ import annotations

import contextlib
import glob
import os
import time
from collections.abc import Callable

from megadata_core.cache import npy_files as cache_files

STATES = ("checked", "vouched", "unverified")


def backdate(directory: str, seconds: int = 3600) -> None:
    """Move the entry files' mtimes back, as for an entry built earlier (a file changed
    less than cache_files.RACY_NS before its check is never remembered)."""
    for path in glob.glob(os.path.join(directory, "*.npy")):
        then = os.stat(path).st_mtime_ns - seconds * 10**9
        os.utime(path, ns=(then, then))


def forget(directory: str, lists: bool) -> None:
    """Clear what this process remembers as checked (and, with ``lists``, the
    directory's verified-files lists)."""
    cache_files._CHECKED.clear()
    if lists:
        for path in glob.glob(os.path.join(directory, "*-verified.json")):
            os.unlink(path)


@contextlib.contextmanager
def unverified():
    """Loads that skip the whole-file check (what a hit cost before it existed)."""
    real = cache_files._check_whole
    cache_files._check_whole = lambda *args: None
    try:
        yield
    finally:
        cache_files._check_whole = real


def time_states(make: Callable[[], object], directory: str, repeats: int) -> dict:
    """``{state: [seconds per repeat]}`` of ``make()`` (a cache hit on ``directory``)."""
    backdate(directory)
    times = {state: [] for state in STATES}
    for _ in range(repeats):
        for state in STATES:
            forget(directory, lists=state == "checked")
            with unverified() if state == "unverified" else contextlib.nullcontext():
                start = time.perf_counter()
                make()
                times[state].append(time.perf_counter() - start)
    forget(directory, lists=False)
    return times
