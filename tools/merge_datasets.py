"""``python tools/merge_datasets.py`` from a checkout: the same program as ``megadata-merge``
(megadata_cli/merge_datasets.py, in tools/cli/)."""

if __name__ == "__main__":
    from megadata_cli.merge_datasets import cli

    cli()
