"""``python tools/make_demo_corpus.py`` from a checkout: the same program as ``python -m
megadata_cli.make_demo_corpus``
(megadata_cli/make_demo_corpus.py, in tools/cli/)."""

if __name__ == "__main__":
    from megadata_cli.make_demo_corpus import cli

    cli()
