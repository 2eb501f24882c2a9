"""``python tools/demo.py`` from a checkout: the same program as ``megadata-demo``
(megadata_cli/demo.py, in tools/cli/)."""

if __name__ == "__main__":
    from megadata_cli.demo import cli

    cli()
