"""``python -m megadata_adapters.trainers.maxtext (MODULE | -m MODULE | SCRIPT.py) [ARGS]``:
run MaxText's ``MODULE`` (or ``SCRIPT``) with ``ARGS`` behind megadata's hook (the
package's :func:`~megadata_adapters.trainers.maxtext.install`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from megadata_adapters.trainers.launch import launch
from megadata_adapters.trainers.maxtext import MaxTextImportError, install

USAGE = (
    "usage: python -m megadata_adapters.trainers.maxtext "
    "(MODULE | -m MODULE | SCRIPT.py) [ARGS...]\n"
    "  e.g. python -m megadata_adapters.trainers.maxtext maxtext.trainers.pre_train.train "
    "CONFIG.yml key=value ..."
)


def main(argv: Sequence[str]) -> None:
    """Run MaxText's ``MODULE`` (or ``SCRIPT``) with ``ARGS`` after :func:`install`."""
    launch(argv, USAGE, install, MaxTextImportError, bare_modules=True)


def cli() -> None:
    """The launcher's entry point (``python -m megadata_adapters.trainers.maxtext``)."""
    main(sys.argv[1:])


if __name__ == "__main__":
    cli()
