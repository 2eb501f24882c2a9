"""``megadata-megatron SCRIPT [ARGS]`` or ``megadata-megatron -m MODULE [ARGS]`` (also
``python -m megadata_adapters.trainers.megatron_datasets ...``, as torchrun's ``-m`` takes
it): run a program (a Megatron-LM training script, pytest) with ``megatron.core.datasets``
served by megadata."""

from __future__ import annotations

import sys

from megadata_adapters.trainers.launch import launch
from megadata_adapters.trainers.megatron_datasets import MegatronImportError, install

USAGE = "usage: megadata-megatron (SCRIPT | -m MODULE) [ARGS...]"


def main(argv: list[str]) -> None:
    launch(argv, USAGE, install, MegatronImportError)


def cli() -> None:
    """The console script ``megadata-megatron``."""
    main(sys.argv[1:])


if __name__ == "__main__":
    cli()
