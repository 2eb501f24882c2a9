"""``python tools/inspect_data.py`` from a checkout: the same program as ``megadata-inspect``
(megadata_cli/inspect_data.py, in tools/cli/)."""

if __name__ == "__main__":
    from megadata_cli.inspect_data import cli

    cli()
