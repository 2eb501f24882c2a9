"""The trainers' launchers: install a hook, then run the trainer's program as Python would.

``python -m megadata_adapters.trainers.X (SCRIPT.py | -m MODULE) [ARGS...]`` (and, where a
trainer is started by module name, ``MODULE`` alone): :func:`launch` prints the usage for
no arguments (exit 2) or ``-h`` (exit 0), reports an install error in one line (exit 1),
then runs the script or module as ``__main__`` with ``ARGS`` as its ``sys.argv[1:]``.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Callable, Sequence


def launch(
    argv: Sequence[str],
    usage: str,
    install: Callable[[], object],
    install_error: type[Exception],
    bare_modules: bool = False,
) -> None:
    """Run ``argv`` (``SCRIPT ARGS``, ``-m MODULE ARGS`` or with ``bare_modules``
    ``MODULE ARGS``) after ``install()``; ``install_error`` is reported in one line."""
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage, file=sys.stderr if not argv else sys.stdout)
        raise SystemExit(0 if argv else 2)
    try:
        install()
    except install_error as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    module = argv[0] == "-m"
    if module:
        argv = argv[1:]
        if not argv:
            print(usage, file=sys.stderr)
            raise SystemExit(2)
    target = argv[0]
    if not module and not (bare_modules and not target.endswith(".py")
                           and not os.path.isfile(target)):
        if not os.path.isfile(target):
            print(f"{target}: no such file\n{usage}", file=sys.stderr)
            raise SystemExit(2)
        sys.argv = argv
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        runpy.run_path(target, run_name="__main__")
        return
    sys.argv = argv
    sys.path.insert(0, os.getcwd())
    runpy.run_module(target, run_name="__main__", alter_sys=True)
