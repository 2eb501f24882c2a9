"""``megadata-megatron SCRIPT [ARGS]`` or ``megadata-megatron -m MODULE [ARGS]`` (also
``python -m megadata_adapters.trainers.megatron_datasets ...``, as torchrun's ``-m`` takes it): run
a
program (a Megatron-LM training script, pytest) with ``megatron.core.datasets`` served by
megadata."""

from __future__ import annotations

import os
import runpy
import sys

from megadata_adapters.trainers.megatron_datasets import MegatronImportError, install

USAGE = "usage: megadata-megatron (SCRIPT | -m MODULE) [ARGS...]"


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not argv else sys.stdout)
        raise SystemExit(0 if argv else 2)
    try:
        install()
    except MegatronImportError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    if argv[0] == "-m":
        if len(argv) < 2:
            print(USAGE, file=sys.stderr)
            raise SystemExit(2)
        sys.argv = argv[1:]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return
    script = argv[0]
    if not os.path.isfile(script):
        print(f"{script}: no such file\n{USAGE}", file=sys.stderr)
        raise SystemExit(2)
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


def cli() -> None:
    """The console script ``megadata-megatron``."""
    main(sys.argv[1:])


if __name__ == "__main__":
    cli()
