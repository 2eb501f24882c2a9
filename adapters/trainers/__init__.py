"""Trainers' own data modules served by megadata: ``megatron_datasets`` is
``megatron.core.datasets`` (``megadata-megatron SCRIPT ARGS`` or ``install()``)."""
