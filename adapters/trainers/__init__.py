"""Trainers' own data paths served by megadata:

- ``megatron_datasets``: ``megatron.core.datasets`` (``megadata-megatron SCRIPT ARGS`` or
  ``install()``);
- ``maxtext``: MaxText's ``grain_file_type: mmap_npy`` input (``python -m
  megadata_adapters.trainers.maxtext maxtext.trainers.pre_train.train CONFIG ...`` or
  ``install()``);
- ``torchtitan``: a dataloader for torchtitan's trainer (``MegadataDataLoader.Config``);
- ``launch``: the launchers' shared ``SCRIPT | -m MODULE`` runner.
"""
