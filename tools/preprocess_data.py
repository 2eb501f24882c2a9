"""``python tools/preprocess_data.py`` from a checkout: the same program as ``megadata-preprocess``
(megadata_cli/preprocess_data.py, in tools/cli/)."""

if __name__ == "__main__":
    from megadata_cli.preprocess_data import cli

    cli()
