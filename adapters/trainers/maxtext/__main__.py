"""``python -m megadata_adapters.trainers.maxtext MODULE CONFIG ...``: MaxText behind
megadata's hook (the package's :func:`main`)."""

from megadata_adapters.trainers.maxtext import cli

if __name__ == "__main__":
    cli()
