"""MaxText's ``mmap_npy`` input, served by megadata: a MaxText config trains unchanged.

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

Not served (a :class:`megadata_core.DataError` says so, naming the setting):
``mmap_split_sentences: true``, a spec with several shards (``DIR|a:b`` or a directory of
``.idx`` files: merge them with ``megadata-merge``, or blend them with ``;``),
``blend_index_dir`` (MaxText's prebuilt blend indices: megadata builds the blend itself),
and a blend without ``steps``. ``grain_file_type: mmap`` (Grain-packed, unshuffled
windows) is left to MaxText.

Use::

    python -m megadata_adapters.trainers.maxtext maxtext.trainers.pre_train.train CONFIG k=v ...
    python -m megadata_adapters.trainers.maxtext -m maxtext.trainers.pre_train.train CONFIG ...
    python -m megadata_adapters.trainers.maxtext SCRIPT.py ARGS...

or call :func:`install` before MaxText builds its input pipeline.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import math
import os
import sys
import threading
import types
from collections.abc import Sequence
from typing import Any

import numpy as np

from megadata_adapters.trainers.launch import launch
from megadata_core.errors import DataError

__all__ = ["MaxTextImportError", "get_mmap_npy_dataset", "install", "installed", "main"]

log = logging.getLogger(__name__)

#: The MaxText module whose ``get_mmap_npy_dataset`` is replaced.
TARGET = "maxtext.input_pipeline.grain_data_processing"
#: The module that defines MaxText's own function (patched too, for direct callers).
SOURCE = "maxtext.input_pipeline._mmap_datasource"
_MARK = "__megadata__"
#: Megatron's (and MaxText's) blend overprovisioning, in percent.
BLEND_MARGIN = 0.5
_lock = threading.Lock()


class MaxTextImportError(DataError, ImportError):
    """MaxText is not installed, or its input pipeline cannot be imported."""


# -- the samples --------------------------------------------------------------------------


def _parse_spec(spec: str) -> tuple[str, str]:
    """``'INDEX_DIR|PREFIX'`` -> ``(INDEX_DIR, PREFIX)``; one ``.bin``/``.idx`` prefix only."""
    parts = spec.strip().split("|")
    if len(parts) != 2:
        raise DataError(
            f"grain_train_files: mmap_npy spec must be 'index_dir|prefix', got {spec!r}"
        )
    index_dir, paths = parts[0].strip(), parts[1].strip()
    if not index_dir:
        raise DataError(f"grain_train_files: {spec!r} names no index directory before '|'")
    prefixes = [p.strip() for p in paths.split(":")]
    if len(prefixes) == 1 and os.path.isfile(prefixes[0] + ".idx"):
        return index_dir, prefixes[0]
    if len(prefixes) == 1 and os.path.isdir(prefixes[0]):
        found = sorted(n for n in os.listdir(prefixes[0]) if n.endswith(".idx"))
        if len(found) == 1:
            return index_dir, os.path.join(prefixes[0], found[0][: -len(".idx")])
        raise DataError(
            f"grain_train_files: {prefixes[0]} is a directory of {len(found)} .idx shards; "
            "megadata serves one .bin/.idx prefix per spec (merge the shards with "
            "megadata-merge, or blend them with ';')"
        )
    if len(prefixes) > 1:
        raise DataError(
            f"grain_train_files: {spec!r} names {len(prefixes)} shards; megadata serves one "
            ".bin/.idx prefix per spec (merge them with megadata-merge, or blend them with ';')"
        )
    raise DataError(f"grain_train_files: no {prefixes[0]}.idx (from {spec!r})")


def _parse_mixture(pattern: str) -> tuple[list[str], list[float]]:
    """MaxText's ``'spec,weight;spec,weight'``: specs and weights normalized once (float64),
    zero weights dropped (``_parse_weighted_mixture``)."""
    specs, weights = [], []
    for i, part in enumerate(pattern.split(";")):
        cut = part.rfind(",")
        if cut == -1 or not part[:cut].strip():
            raise DataError(f"grain_train_files: entry {i} {part!r} is not 'spec,weight'")
        try:
            weight = float(part[cut + 1 :])
        except ValueError:
            raise DataError(f"grain_train_files: entry {i} has weight {part[cut + 1:]!r}") from None
        if not math.isfinite(weight) or weight < 0:
            raise DataError(f"grain_train_files: entry {i} has weight {weight}, not >= 0")
        specs.append(part[:cut].strip())
        weights.append(weight)
    array = np.asarray(weights, dtype=np.float64)
    if array.sum() <= 0:
        raise DataError(f"grain_train_files: the weights of {pattern!r} are all 0")
    normalized = (array / np.sum(array)).tolist()
    kept = [(s, w) for s, w in zip(specs, normalized) if w > 0]
    return [s for s, _ in kept], [w for _, w in kept]


def _split_range(split: str | None, split_index: int, count: int) -> range:
    """The documents of part ``split_index`` of ``split`` (MaxText's ``parse_split_range``:
    cumulative fractions, rounded), or all ``count``."""
    if not split:
        return range(count)
    try:
        ratios = [float(x) for x in str(split).split(",")]
    except ValueError:
        raise DataError(f"mmap_npy_split: {split!r} is not comma-separated numbers") from None
    if not 0 <= split_index < len(ratios) or sum(ratios) <= 0:
        raise DataError(f"mmap_npy_split: {split!r} has no part {split_index}")
    total = sum(ratios)
    cumulative = [0.0]
    for ratio in ratios:
        cumulative.append(cumulative[-1] + ratio / total)
    return range(
        int(round(cumulative[split_index] * count)), int(round(cumulative[split_index + 1] * count))
    )


class _Plan:
    """Everything that makes the samples (picklable: a Grain worker rebuilds from it)."""

    def __init__(
        self,
        members: list[tuple[str, str, int | None]],
        weights: list[float] | None,
        size: int | None,
        *,
        seq_length: int,
        eod_id: int,
        seed: int,
        split: str | None,
        split_index: int,
        num_epoch: int,
        path_to_cache: str,
    ) -> None:
        self.members = members  # (index_dir, prefix, num_samples or None)
        self.weights = weights
        self.size = size
        self.seq_length = seq_length
        self.eod_id = eod_id
        self.seed = seed
        self.split = split
        self.split_index = split_index
        self.num_epoch = num_epoch
        self.path_to_cache = path_to_cache

    def build(self):
        """The megadata dataset: a GPTDataset, or a BlendedDataset of them."""
        import megadata_core as mdc

        name = ("train", "valid", "test")[min(self.split_index, 2)]
        datasets = []
        for index_dir, prefix, num_samples in self.members:
            indexed = mdc.IndexedDataset(prefix)
            if indexed.sequence_lengths.shape[0] != indexed.document_indices.shape[0] - 1:
                raise DataError(
                    f"{prefix}: {indexed.document_indices.shape[0] - 1} documents != "
                    f"{indexed.sequence_lengths.shape[0]} sequences (preprocessed with "
                    "--split-sentences); megadata serves mmap_split_sentences: false only"
                )
            documents = _split_range(self.split, self.split_index, len(indexed))
            if len(documents) == 0:
                raise DataError(
                    f"{prefix}: no documents in part {self.split_index} of mmap_npy_split "
                    f"{self.split!r}"
                )
            if num_samples is None:  # MaxText: whole epochs, num_epoch of them
                tokens = int(np.sum(indexed.sequence_lengths[documents.start : documents.stop]))
                num_samples = (tokens - 1) // self.seq_length * max(1, self.num_epoch)
            config = mdc.GPTDataConfig(
                random_seed=self.seed,
                sequence_length=self.seq_length,
                path_to_cache=self.path_to_cache if len(self.members) > 1 else index_dir,
                create_attention_mask=False,
                eod_id=self.eod_id,
                blend_order="megatron",
            )
            datasets.append(mdc.GPTDataset(indexed, documents, num_samples, config, name))
        if self.weights is None:
            return datasets[0]
        return mdc.BlendedDataset(datasets, self.weights, self.size, datasets[0].config)


class MegadataNpySource:
    """A Grain random-access source: sample ``i`` as MaxText's ``MegatronNpyDataSource``
    gives it, ``{"text": int32 [S + 1]}``, read by megadata."""

    def __init__(self, plan: _Plan) -> None:
        self._open(plan)

    def _open(self, plan: _Plan) -> None:
        self._plan = plan
        self.dataset = plan.build()
        self._length = len(self.dataset) if plan.size is None else min(plan.size, len(self.dataset))
        log.info("megadata serves MaxText's mmap_npy samples: %r", self)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError(f"index {index} out of range for {self._length} samples")
        dataset, index = self.dataset, int(index)
        if self._plan.weights is not None:  # the blend's member and that member's sample
            position = index
            member = int(dataset.dataset_index[position])
            index = int(dataset.dataset_sample_index[position])
            members = dataset.datasets
            if not (0 <= member < len(members) and 0 <= index < len(members[member])):
                raise DataError(
                    f"blend sample {position}: dataset {member}, sample {index} is out of range"
                )
            dataset = members[member]
        # Megatron's one-sample read: S + 1 tokens (int32), as MaxText's source gives them
        return {"text": dataset.sample_text(index).tokens}

    def __getstate__(self) -> dict:
        return {"plan": self._plan}

    def __setstate__(self, state: dict) -> None:
        self._open(state["plan"])

    def __repr__(self) -> str:
        return f"MegadataNpySource({self._length} samples of {self.dataset!r})"


def get_mmap_npy_dataset(
    data_file_pattern,
    split_sentences,
    seq_length,
    eod_id,
    num_epoch,
    host_index,
    host_count,
    num_threads,
    prefetch_buffer_size,
    blend_cache_dir,
    blend_index_dir,
    blend_split,
    apply_transforms,
    num_samples=None,
    seed=1234,
    blend_margin=BLEND_MARGIN,
    split=None,
    split_index=0,
):
    """MaxText's ``get_mmap_npy_dataset`` (same arguments, same iterator), reading through
    megadata (module docstring). ``blend_split`` ("train"/"eval") only named MaxText's blend
    cache files; megadata's cache keys say everything."""
    import grain.python as grain

    if split_sentences:
        raise DataError(
            "mmap_split_sentences: true is not served by megadata (Megatron, and megadata, "
            "index sequences); run without megadata_adapters.trainers.maxtext for this corpus"
        )
    if blend_index_dir:
        raise DataError(
            f"blend_index_dir: {blend_index_dir!r}: megadata builds (and caches) the blend "
            "indices itself; drop blend_index_dir"
        )
    common: dict[str, Any] = {
        "seq_length": int(seq_length),
        "eod_id": int(eod_id),
        "seed": int(seed),
        "split": split or None,
        "split_index": int(split_index),
        "num_epoch": int(num_epoch or 1),
    }
    if ";" not in data_file_pattern:
        index_dir, prefix = _parse_spec(data_file_pattern)
        plan = _Plan([(index_dir, prefix, num_samples)], None, None, path_to_cache=index_dir,
                     **common)
        dataset = grain.MapDataset.source(MegadataNpySource(plan))
        return apply_transforms(
            dataset, False, 0, 1, host_index, host_count, num_threads, prefetch_buffer_size
        )
    specs, weights = _parse_mixture(data_file_pattern)
    parsed = [_parse_spec(spec) for spec in specs]
    buffers: list[int | None] = [None] * len(parsed)
    if num_samples is not None:  # Megatron's per-dataset sizes, as MaxText computes them
        buffers = [
            math.ceil(math.ceil(num_samples * w) * (1.0 + blend_margin / 100.0))
            for w in weights
        ]
    if len(parsed) == 1:  # one weight left (the others 0): MaxText reads it alone
        plan = _Plan([(parsed[0][0], parsed[0][1], buffers[0])], None, None,
                     path_to_cache=parsed[0][0], **common)
        dataset = grain.MapDataset.source(MegadataNpySource(plan))
        return apply_transforms(
            dataset, False, 0, 1, host_index, host_count, num_threads, prefetch_buffer_size
        )
    if num_samples is None:
        raise DataError(
            "steps: a blend (';' in grain_train_files) needs steps > 0: its size is "
            "steps * global_batch_size (megadata builds no unsized weighted blend)"
        )
    plan = _Plan(
        [(d, p, b) for (d, p), b in zip(parsed, buffers)],
        weights,
        int(num_samples),
        path_to_cache=blend_cache_dir or parsed[0][0],
        **common,
    )
    dataset = grain.MapDataset.source(MegadataNpySource(plan))
    dataset = dataset[host_index::host_count]
    return dataset.to_iter_dataset(
        read_options=grain.ReadOptions(num_threads=num_threads,
                                       prefetch_buffer_size=prefetch_buffer_size)
    )


setattr(get_mmap_npy_dataset, _MARK, True)


# -- the hook -----------------------------------------------------------------------------


def _patch(module: types.ModuleType) -> None:
    if getattr(module, _MARK, False):
        return
    names = vars(module)
    original = names["get_mmap_npy_dataset"]
    if getattr(original, _MARK, False):  # bound from the patched _mmap_datasource
        original = vars(sys.modules[SOURCE])["maxtext_get_mmap_npy_dataset"]
    names["maxtext_get_mmap_npy_dataset"] = original  # MaxText's own, kept
    names["get_mmap_npy_dataset"] = get_mmap_npy_dataset
    names[_MARK] = True


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
        if fullname not in (TARGET, SOURCE):
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
        for name in (TARGET, SOURCE):
            module = sys.modules.get(name)
            if module is not None:
                _patch(module)


# -- the launcher -------------------------------------------------------------------------

USAGE = (
    "usage: python -m megadata_adapters.trainers.maxtext "
    "(MODULE | -m MODULE | SCRIPT.py) [ARGS...]\n"
    "  e.g. python -m megadata_adapters.trainers.maxtext maxtext.trainers.pre_train.train "
    "CONFIG.yml key=value ..."
)


def main(argv: Sequence[str]) -> None:
    """Run MaxText's ``MODULE`` (or ``SCRIPT``) with ``ARGS`` after :func:`install`."""
    launch(argv, USAGE, install, MaxTextImportError, bare_modules=True)


def cli() -> None:
    """The launcher's entry point (``python -m megadata_adapters.trainers.maxtext``)."""
    main(sys.argv[1:])


if __name__ == "__main__":
    # Run as the named module, not as __main__: Grain workers unpickle the source's class
    # by its module's name.
    from megadata_adapters.trainers.maxtext import cli as _cli

    _cli()
