"""ml_collections data configs (``get_config()``), one per use case; installed as
``megadata_cli.configs``. ``megadata-build-index --config=NAME`` takes one by its name
(``single_corpus``, ``weighted_blend``, ...) or any config file by its path."""
