"""megadata's adapters: thin skins over the systems outside the numpy core.

Rooms:

- ``frameworks/``: what trainers consume (Grain sources, torch datasets and loaders, JAX
  global arrays, MaxText's key names).
- ``storage/``: byte sources for corpora in object storage (TensorStore, MSC), found by the
  core through the ``megadata.storage`` entry points.
- ``engines/``: where preprocessing runs and what it reads (Ray, parquet).
- ``tokenizing/``: tokenizers by Megatron's and Hugging Face's names, the gigatoken fast
  path and the proofs that it gives the reference ids, sentence splitters.
- ``trainers/``: trainers' own data modules served by megadata (the Megatron drop-in).

The framework skins and the drop-in are also importable from here by their short names,
loaded on first use so that no framework is imported before it is asked for::

    from megadata_adapters import grain_source, jax_sharding, tensorstore_bins, torch_data
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: Short name -> the module it stands for.
SHORT_NAMES = {
    "grain_source": "megadata_adapters.frameworks.grain_source",
    "torch_data": "megadata_adapters.frameworks.torch_data",
    "jax_sharding": "megadata_adapters.frameworks.jax_sharding",
    "maxtext_keys": "megadata_adapters.frameworks.maxtext_keys",
    "tensorstore_bins": "megadata_adapters.storage.tensorstore_bins",
    "msc_bins": "megadata_adapters.storage.msc_bins",
    "megatron_datasets": "megadata_adapters.trainers.megatron_datasets",
}


def __getattr__(name: str) -> ModuleType:
    if name in SHORT_NAMES:
        return importlib.import_module(SHORT_NAMES[name])
    raise AttributeError(f"module 'megadata_adapters' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *SHORT_NAMES])
