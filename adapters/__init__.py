"""megadata's adapters: thin skins over the systems outside the numpy core.

Rooms:

- ``frameworks/``: what trainers consume (Grain sources, torch datasets and loaders, JAX
  global arrays).
- ``storage/``: byte sources for corpora in object storage (TensorStore, MSC), found by the
  core through the ``megadata.storage`` entry points.
- ``engines/``: where preprocessing runs and what it reads (Ray, parquet).
- ``tokenizing/``: tokenizers by Megatron's and Hugging Face's names, the gigatoken fast
  path and the proofs that it gives the reference ids, sentence splitters.
- ``trainers/``: trainers' own data paths (the Megatron drop-in, MaxText, torchtitan).

The framework skins and the drop-in are also importable by their short names, either
spelling, loaded on first use (no framework is imported before it is asked for)::

    from megadata_adapters import grain_source, jax_sharding, tensorstore_bins, torch_data
    import megadata_adapters.grain_source
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType

#: Short name -> the module it stands for.
SHORT_NAMES = {
    "grain_source": "megadata_adapters.frameworks.grain_source",
    "torch_data": "megadata_adapters.frameworks.torch_data",
    "jax_sharding": "megadata_adapters.frameworks.jax_sharding",
    "maxtext_keys": "megadata_adapters.trainers.maxtext.keys",
    "tensorstore_bins": "megadata_adapters.storage.tensorstore_bins",
    "msc_bins": "megadata_adapters.storage.msc_bins",
    "megatron_datasets": "megadata_adapters.trainers.megatron_datasets",
}
#: Importable name -> the module it is: the short names, and a moved module's old home.
ALIASES = {f"{__name__}.{short}": name for short, name in SHORT_NAMES.items()}
ALIASES[f"{__name__}.frameworks.maxtext_keys"] = SHORT_NAMES["maxtext_keys"]


class _Aliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """An alias (or a name under it) imports as the module it stands for: one module in
    ``sys.modules`` under both names, with its own ``__spec__``."""

    def find_spec(self, fullname, path=None, target=None):
        for alias, name in ALIASES.items():
            if fullname == alias or fullname.startswith(alias + "."):
                spec = importlib.util.spec_from_loader(fullname, self)
                if spec is not None:
                    spec.loader_state = name + fullname[len(alias):]
                return spec
        return None

    def create_module(self, spec):
        module = importlib.import_module(spec.loader_state)
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = module.__spec__.loader_state  # the import set the alias's spec


if not any(isinstance(finder, _Aliases) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Aliases())


def __getattr__(name: str) -> ModuleType:
    if name in SHORT_NAMES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'megadata_adapters' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *SHORT_NAMES])
