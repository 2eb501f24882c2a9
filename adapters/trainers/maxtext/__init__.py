"""MaxText's Megatron inputs (``mmap_npy``, ``mmap``) served by megadata: configs unchanged.

MaxText (0.2.5) reads Megatron ``.bin``/``.idx`` corpora itself with ``dataset_type: grain``
and ``grain_file_type: mmap_npy``: ``grain_train_files`` is ``INDEX_DIR|PREFIX`` (a blend:
``INDEX_DIR_A|A,0.7;INDEX_DIR_B|B,0.3``), and its ``make_grain_train_iterator`` /
``make_grain_eval_iterator`` call ``get_mmap_npy_dataset`` (in
``maxtext.input_pipeline.grain_data_processing``) for the samples: Megatron's document,
sample and shuffle indices (``.npy`` files in ``INDEX_DIR``, written by
``maxtext/utils/mmap_index_builder.py`` or at start-up) and its blending.

:func:`install` replaces that ``get_mmap_npy_dataset`` with :func:`get_mmap_npy_dataset`
here, which builds the same samples with megadata: a :class:`megadata_core.GPTDataset` per
prefix (``random_seed`` = ``data_shuffle_seed``, ``sequence_length`` =
``max_target_length``, ``num_samples`` = ``steps * global_batch_size_to_load`` as MaxText
asks, the documents of ``mmap_npy_split``'s part) and, for a blend, a
:class:`megadata_core.BlendedDataset` (``blend_order="megatron"``, each member sized
``ceil(ceil(N * w) * 1.005)`` as MaxText and Megatron do). Each sample is handed to
MaxText as ``{"text": int32 [S + 1]}``, value for value what MaxText's own
``MegatronNpyDataSource`` gives, in the same order and host sharding; everything after it
(``MegatronSplitInputsTargets`` into ``inputs``/``targets``/``*_segmentation``/
``*_position`` with ``reset_attention_mask``, ``eod_mask_loss`` and
``packing_max_segments_per_sample``, batching, the multi-host iterator and its checkpoint)
stays MaxText's. ``INDEX_DIR`` is megadata's ``path_to_cache``: megadata's index cache is
written and read there (a blend's: ``blend_cache_dir``, else the first spec's directory),
and MaxText's offline index files are not needed. ``mmap_npy_split`` parts are MaxText's
document ranges (cumulative fractions, rounded), which can differ from megatron-core's
split by a document in rare rounding cases: MaxText's are kept. Grain workers
(``grain_worker_count > 0``) get a picklable source that reopens the cache.

``grain_file_type: mmap`` (MaxText's fixed windows over the documents in order, no
Megatron indices): MaxText's own ``get_mmap_dataset`` runs, its windows
(``MMapSampleIndexDataSource``), shuffle, repeat and host sharding included, over
:class:`MegadataDocumentSource`, megadata's reads of the same documents in the same order
(shard directories and ``mmap_split_sentences`` as MaxText reads them).

The reads: Grain asks a host's source for its indices in order (from several threads);
:class:`MegadataNpySource` reads those 64 at a time in one batched read of megadata's
(a request out of that order is read alone).

Not served (a :class:`megadata_core.DataError` says so, naming the setting), with
``mmap_npy``: ``mmap_split_sentences: true``, a spec with several shards (``DIR|a:b``
or a directory of ``.idx`` files: merge them with ``megadata-merge``, or blend them with
``;``), ``blend_index_dir`` (MaxText's prebuilt blend indices: megadata builds the blend
itself), and a blend without ``steps``.

Use::

    python -m megadata_adapters.trainers.maxtext maxtext.trainers.pre_train.train CONFIG k=v ...
    python -m megadata_adapters.trainers.maxtext -m maxtext.trainers.pre_train.train CONFIG ...
    python -m megadata_adapters.trainers.maxtext SCRIPT.py ARGS...

or call :func:`install` before MaxText builds its input pipeline.

The parts (docs/trainers.md): ``keys`` (MaxText's names: batch keys, patched modules, a
data config's keys), ``source`` (the Grain sources), ``__main__`` (the launcher),
``resume`` (a checkpointed iterator on another number of hosts); the hook is here.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

from megadata_adapters.trainers.maxtext.keys import MARK, PATCHED, SOURCE, TARGET, UTILS
from megadata_adapters.trainers.maxtext.resume import (
    reshard_iterator_checkpoint,
    reshard_states,
)
from megadata_adapters.trainers.maxtext.source import (
    BLEND_MARGIN,
    MegadataDocumentSource,
    MegadataNpySource,
    create_mmap_source,
    get_mmap_npy_dataset,
)
from megadata_core.errors import DataError

__all__ = [
    "BLEND_MARGIN",
    "MaxTextImportError",
    "MegadataDocumentSource",
    "MegadataNpySource",
    "create_mmap_source",
    "get_mmap_npy_dataset",
    "install",
    "installed",
    "reshard_iterator_checkpoint",
    "reshard_states",
]

_lock = threading.Lock()


class MaxTextImportError(DataError, ImportError):
    """MaxText is not installed, or its input pipeline cannot be imported."""


# -- the hook -----------------------------------------------------------------------------

#: What is replaced in each MaxText module (MaxText's own stays as ``maxtext_NAME``):
#: ``get_mmap_npy_dataset`` where it is defined and where the pipeline imported it, and
#: ``create_mmap_source``, which MaxText's own ``get_mmap_dataset`` calls by name.
_REPLACED: dict[str, dict[str, Callable[..., Any]]] = {
    TARGET: {"get_mmap_npy_dataset": get_mmap_npy_dataset},
    SOURCE: {
        "get_mmap_npy_dataset": get_mmap_npy_dataset,
        "create_mmap_source": create_mmap_source,
    },
}


def _split_passing_split_samples(original: Callable[..., Any]) -> Callable[..., Any]:
    """MaxText's ``MegatronSplitInputsTargets.map``, passing on an element that arrives
    split (megadata's own samples: ``inputs`` and no ``text``) as it is."""

    def map(self, element):  # noqa: A001 (Grain's method name)
        if "text" not in element and "inputs" in element:
            return element
        return original(self, element)

    setattr(map, MARK, True)
    map.__doc__ = original.__doc__
    return map


def _patch(module: types.ModuleType) -> None:
    if getattr(module, MARK, False):
        return
    names = vars(module)
    if module.__name__ == UTILS:
        split = names["MegatronSplitInputsTargets"]
        if not getattr(split.map, MARK, False):
            split.map = _split_passing_split_samples(split.map)
        names[MARK] = True
        return
    for name, ours in _REPLACED[module.__name__].items():
        original = names[name]
        if getattr(original, MARK, False):  # bound from the patched _mmap_datasource
            original = vars(sys.modules[SOURCE])[f"maxtext_{name}"]
        names[f"maxtext_{name}"] = original  # MaxText's own, kept
        names[name] = ours
    names[MARK] = True


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Patches the MaxText modules as they are imported (none is imported before)."""

    _megadata_maxtext = True

    def find_spec(self, fullname, path, target=None):
        if fullname not in PATCHED:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


def installed() -> bool:
    """Whether :func:`install` has run in this process."""
    return any(getattr(f, "_megadata_maxtext", False) for f in sys.meta_path)


def install() -> None:
    """Serve MaxText's ``mmap_npy`` input through megadata (module docstring). Idempotent.

    Nothing of MaxText is imported here (jax and MaxText's flags load as MaxText orders):
    ``maxtext.input_pipeline.grain_data_processing`` and ``._mmap_datasource`` are patched
    as they are imported, or now where already imported. Their own function stays
    reachable as ``maxtext_get_mmap_npy_dataset``.

    Raises:
        MaxTextImportError: MaxText is not installed.
    """
    with _lock:
        try:
            found = importlib.util.find_spec("maxtext.input_pipeline")
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise MaxTextImportError(
                "maxtext is not installed (pip install 'maxtext[tpu]==0.2.5', Python >= 3.12): "
                "megadata_adapters.trainers.maxtext serves MaxText's input pipeline"
            )
        if not installed():
            sys.meta_path.insert(0, _Finder())
        for name in PATCHED:
            module = sys.modules.get(name)
            if module is not None:
                _patch(module)
