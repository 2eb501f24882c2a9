"""Levanter's ``MixtureDataset`` (weight stages) beside our blend schedules in the
``schedule`` suite, run in an overlay environment.

Levanter's stages are ``[(start_seq_index, {name: weight}), ...]`` with starts on
multiples of a block size (its ``mixture_block_size`` defaults to 2048); each block holds
fixed per-dataset counts, shuffled by a key folded with the block's number, and each
dataset's index carries on across stages. The package with stages is ``marin-levanter``
(``levanter`` on the index is a 2023 release without them). Its wheel requires some forty
packages (transformers<5, datasets<5, tensorstore<0.1.82, wandb, gcsfs, ...), several
pinned below what this environment holds, so it lives in a venv in the bench cache
(``$MEGADATA_BENCH_CACHE/levanter-venv-…``) whose ``.pth`` appends this interpreter's
site-packages (jax, numpy and the rest are not reinstalled). ``import
levanter.data.mixture`` runs the package's own ``__init__`` (trainer, models, tracker,
the cluster client), so the overlay holds what that import chain loads and nothing
more: :data:`PACKAGES`, installed with ``--no-deps``, at versions inside every range
their importers declare (filelock, fsspec, huggingface_hub, safetensors and tensorstore
shadow this environment's there only). Declared requirements the chain never imports
(transformers, gcsfs, s3fs, fastapi, ...) are left out. The venv is built under a
temporary name and renamed into place once the import works, so its presence means it is
complete. Levanter runs in a fresh interpreter of it (:mod:`bench.levanter_child`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import numpy as np

from bench.harness import ChildFailedError, child_result, progress
from bench.overlays import Overlay, last_line

MARIN = "0.2.20.dev202606180959"
LEVANTER = f"marin-levanter=={MARIN}"
PACKAGES = (
    LEVANTER,
    # levanter.data.mixture itself: haliax (its util, and haliax's own __init__), equinox
    # and jaxtyping; haliax.quantization imports aqt, which imports flax
    f"marin-haliax=={MARIN}", "equinox==0.13.8", "jaxtyping==0.3.11", "wadler-lindig==0.1.8",
    "aqtp==0.9.0", "flax==0.12.8", "jmp==0.0.4", "chex==0.1.92", "toolz==1.2.0",
    "optax==0.2.6", "safetensors==0.6.2", "tensorstore==0.1.81",
    # levanter/__init__: config and tracker (draccus, wandb, GitPython), trainer and
    # distributed (marin's fray / iris / rigging / finelog cluster clients)
    "draccus==0.11.6", "mergedeep==1.3.4", "typing-inspect==0.9.0", "mypy-extensions==1.2.0",
    "wandb==0.31.0", "platformdirs==4.14.8", "GitPython==3.2.1", "gitdb==4.0.12",
    "smmap==5.0.3", "tqdm-loggable==0.4.1", "pytimeparse==1.1.10", "humanfriendly==10.0",
    "tblib==3.2.2", "filelock==3.32.7",
    f"marin-fray=={MARIN}", f"marin-iris=={MARIN}", f"marin-rigging=={MARIN}",
    "marin-finelog==0.2.10", "connect-python==0.9.0", "pyqwest==0.12.0", "uvicorn==0.54.0",
    # levanter.data's sharded_datasource: Hugging Face datasets (<5) and what it imports
    "datasets==4.8.5", "braceexpand==0.1.7", "multiprocess==0.70.19", "dill==0.4.1",
    "pandas==3.1.1", "xxhash==4.1.0", "httpx==0.28.1", "httpcore==1.0.9",
    "fsspec==2026.2.0", "huggingface-hub==1.33.0",
)
MIN_SCALE = 0.1  # below: the overlay is used only if it exists already
DEFAULT_BLOCK = 2048  # Levanter's LmDataConfig.mixture_block_size
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "levanter_child.py")
ENV = {"JAX_PLATFORMS": "cpu"}


OVERLAY = Overlay("levanter", LEVANTER, ("--no-deps", *PACKAGES), "levanter.data.mixture",
                  tuple(ENV.items()), pins=PACKAGES)
overlay_python = OVERLAY.python


def block_size(size: int) -> int:
    """Levanter's default block (2048) when the run holds two of them; below that, the
    largest power of 2 that fits twice (a stage must start on a block boundary > 0)."""
    if size >= 2 * DEFAULT_BLOCK:
        return DEFAULT_BLOCK
    return 1 << max(0, (size // 2).bit_length() - 1)


def _python(bench) -> tuple[str | None, str]:
    create = bench.scale >= MIN_SCALE
    if create and not os.path.exists(OVERLAY.directory()):
        progress("Levanter: the overlay venv (created on first use: venv + pip install)")
    return overlay_python(create)


def _run(python: str, spec: dict) -> dict | str:
    try:
        return child_result([python, "-I", CHILD, json.dumps(spec)], "Levanter", env=ENV)
    except ChildFailedError as failure:
        return f"fails: {last_line(str(failure))}"


def levanter_schedule(bench, size: int, half: int, names: tuple[str, ...],
                      weights_a: tuple[float, ...], weights_b: tuple[float, ...]) -> dict | str:
    """Levanter's MixtureDataset over ``names`` with stages [(0, A), (switch, B)]
    (``switch``: ``half`` rounded to a block), samples [0, size) read: the child's figures
    (:func:`bench.levanter_child.repeats`, with ``levanter`` and ``jax`` versions), or
    why there are none."""
    python, why = _python(bench)
    if python is None:
        return why
    spec = {"size": size, "half": half, "names": list(names), "weights_a": list(weights_a),
            "weights_b": list(weights_b), "seed": bench.seed, "block_size": block_size(size)}
    result = _run(python, {"repeats": spec})
    if isinstance(result, str):
        return result
    return {**result["repeats"], "levanter": result["levanter"], "jax": result["jax"]}


def levanter_many(bench, weights: np.ndarray, starts: list[int], size: int,
                  batches: np.ndarray) -> dict | str:
    """Levanter's MixtureDataset with the same stages (``weights`` [stages, datasets],
    ``starts`` rounded to blocks) over index-only datasets: construction and reads of
    ``batches`` (:func:`bench.levanter_child.many`), or why there are none."""
    python, why = _python(bench)
    if python is None:
        return why
    directory = tempfile.mkdtemp(prefix="levanter_", dir=bench.workdir)
    try:
        np.save(os.path.join(directory, "weights.npy"), np.asarray(weights, dtype=np.float64))
        np.save(os.path.join(directory, "batches.npy"), np.asarray(batches, dtype=np.int64))
        spec = {"weights": os.path.join(directory, "weights.npy"), "starts": list(starts),
                "size": size, "batches": os.path.join(directory, "batches.npy"),
                "seed": bench.seed, "block_size": block_size(size)}
        result = _run(python, {"many": spec})
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if isinstance(result, str):
        return result
    return {**result["many"], "levanter": result["levanter"]}
