"""``python tools/preprocess_data_fast.py`` from a checkout: the same program as
``megadata-preprocess-fast``
(megadata_cli/preprocess_data_fast.py, in tools/cli/)."""

if __name__ == "__main__":
    from megadata_cli.preprocess_data_fast import cli

    cli()
