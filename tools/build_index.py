"""``python tools/build_index.py`` from a checkout: the same program as ``megadata-build-index``
(megadata_cli/build_index.py, in tools/cli/)."""

if __name__ == "__main__":
    from megadata_cli.build_index import cli

    cli()
