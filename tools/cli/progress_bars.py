"""Progress bars for the programs in tools/: tqdm on stderr, only on a terminal.

A bar is drawn when the program's ``--progress`` flag is on (``--noprogress`` turns it
off) and stderr is a terminal; piped or redirected runs (logs, CI) get no bar. The core
takes plain callbacks (``progress(n)``), so a bar's ``update`` is passed to it.
"""

from __future__ import annotations

import sys


def bar(enabled: bool, **options):
    """A tqdm bar on stderr; disabled unless ``enabled`` and stderr is a terminal."""
    from tqdm import tqdm

    options.setdefault("file", sys.stderr)
    options.setdefault("dynamic_ncols", True)
    return tqdm(disable=not (enabled and _is_terminal(options["file"])), **options)


def _is_terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())


class LazyBar:
    """A :func:`bar` made at its first ``update``: a phase that never runs draws nothing."""

    def __init__(self, enabled: bool, **options) -> None:
        self.enabled = enabled
        self.options = options
        self.bar = None

    def update(self, count: int = 1) -> None:
        if self.bar is None:
            self.bar = bar(self.enabled, **self.options)
        self.bar.update(count)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
