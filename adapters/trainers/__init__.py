"""Trainers' own data paths served by megadata, one package each with the same parts (its
config keys, its source or loader, its launcher, resume; docs/trainers.md names them):

- ``megatron_datasets``: ``megatron.core.datasets`` (``megadata-megatron SCRIPT ARGS`` or
  ``install()``), module for module;
- ``maxtext``: MaxText's ``grain_file_type: mmap_npy`` input (``python -m
  megadata_adapters.trainers.maxtext maxtext.trainers.pre_train.train CONFIG ...`` or
  ``install()``);
- ``torchtitan``: a dataloader for torchtitan's trainer (``MegadataDataLoader.Config``);
- ``launch``: the launchers' shared ``SCRIPT | -m MODULE`` runner.
"""
