"""OLMo-core's ``NumpyPackedFSLDataset`` as a peer of the packing suite, run in an overlay
environment.

``ai2-olmo-core`` (3.0.0) installs without CUDA over this environment's torch, but pins
``filelock<4`` and (through ``cached-path``) ``huggingface_hub<2``: installed here it would
downgrade packages the rest of the environment uses. So it lives in a venv in the bench
cache (``$MEGADATA_BENCH_CACHE/olmo-venv-…``) whose ``.pth`` appends this interpreter's
site-packages (torch and numpy are not reinstalled; OLMo-core's own filelock and
huggingface_hub shadow the base ones there only). It is built under a temporary name and
renamed into place once ``pip install`` succeeded, so its presence means it is complete.
Each OLMo-core build runs in a fresh interpreter of that venv (:mod:`bench.olmo_child`).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import site
import subprocess
import sys
import tempfile

import numpy as np

from bench.cloud import cache_dir
from bench.harness import ChildFailedError, child_result

OLMO_CORE = "ai2-olmo-core==3.0.0"
INSTALL_TIMEOUT_S = 900
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "olmo_child.py")


def overlay_dir() -> str:
    """The overlay venv's path: keyed by this interpreter and its site-packages, so a
    changed base environment gets a fresh overlay."""
    key = json.dumps([sys.executable, sys.version, site.getsitepackages(), OLMO_CORE])
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    return os.path.join(cache_dir(), f"olmo-venv-{tag}-{digest}")


def overlay_python(create: bool) -> tuple[str | None, str]:
    """(the overlay's python, "") or (None, why not). ``create``: build the overlay when
    it does not exist yet (a minute or so: venv + pip install over the network)."""
    target = overlay_dir()
    python = os.path.join(target, "bin", "python")
    if os.path.exists(python):
        return python, ""
    if not create:
        return None, f"the overlay venv {target} does not exist (not created at this scale)"
    os.makedirs(os.path.dirname(target), exist_ok=True)
    building = tempfile.mkdtemp(
        prefix=os.path.basename(target) + ".tmp-", dir=os.path.dirname(target)
    )
    os.chmod(building, 0o755)  # mkdtemp's 0700 would lock out other users of the cache
    try:
        reason = _build_overlay(building)
        if reason:
            return None, reason
        try:
            os.rename(building, target)
        except OSError:
            if not os.path.exists(python):  # not a concurrent run that finished first
                raise
        return python, ""
    finally:
        shutil.rmtree(building, ignore_errors=True)


def _build_overlay(directory: str) -> str:
    """Create the venv in ``directory`` and install OLMo-core into it; "" or why it failed."""
    done = subprocess.run(
        [sys.executable, "-m", "venv", directory], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return f"python -m venv failed: {_last_line(done.stderr)}"
    python = os.path.join(directory, "bin", "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    # addsitedir (not a bare path): the base's own .pth files are processed as well
    lines = [f"import site; site.addsitedir({path!r})" for path in site.getsitepackages()]
    with open(os.path.join(purelib, "zz_megadata_base.pth"), "w") as stream:
        stream.write("\n".join(lines) + "\n")
    try:
        done = subprocess.run(
            [python, "-m", "pip", "install", "--quiet", OLMO_CORE],
            capture_output=True, text=True, check=False, timeout=INSTALL_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"pip install {OLMO_CORE} timed out after {INSTALL_TIMEOUT_S} s"
    if done.returncode != 0:
        return f"pip install {OLMO_CORE} failed: {_last_line(done.stderr or done.stdout)}"
    check = subprocess.run(
        [python, "-I", "-c", "import olmo_core.data.numpy_dataset"],
        capture_output=True, text=True, check=False,
    )
    if check.returncode != 0:
        return f"import olmo_core fails in the overlay: {_last_line(check.stderr)}"
    return ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


# -- OLMo-core's inputs -----------------------------------------------------------------


def write_olmo_tokens(path: str, lengths: np.ndarray, eos: int, vocab: int, seed: int) -> None:
    """OLMo-core's token file for documents of ``lengths`` (in this order): raw uint16
    token ids (a Dolma ``.npy`` has no header), random ids in [1, vocab) with ``eos``
    ending every document, which is how OLMo-core finds the boundaries by default."""
    ends = np.cumsum(lengths, dtype=np.int64)
    tokens = np.random.default_rng(seed).integers(1, vocab, size=int(ends[-1]), dtype=np.uint16)
    tokens[ends - 1] = eos
    tokens.tofile(path)
    np.save(path + ".lengths.npy", np.asarray(lengths, dtype=np.int64))


def write_olmo_metadata(path: str, lengths: np.ndarray) -> None:
    """A sparse token file of the documents' total size and the Dolma metadata
    ``.csv.gz`` beside it (``start,end`` per document), which OLMo-core reads with
    ``use_array_if_local=False`` (its path for remote sources, and the authoritative one)."""
    ends = np.cumsum(lengths, dtype=np.int64)
    with open(path, "wb"):
        pass
    os.truncate(path, int(ends[-1]) * 2)
    starts = ends - lengths
    metadata = path[: -len(".npy")] + ".csv.gz"
    with gzip.open(metadata, "wt", compresslevel=1) as stream:
        step = 1_000_000
        for first in range(0, len(lengths), step):
            pairs = np.stack([starts[first : first + step], ends[first : first + step]], axis=1)
            stream.write("\n".join(f"{a},{b}" for a, b in pairs.tolist()) + "\n")
    np.save(path + ".lengths.npy", np.asarray(lengths, dtype=np.int64))


def run_olmo(python: str, tokens: str, sequence_length: int, eos: int, vocab: int,
             metadata: bool, work_dir: str) -> dict | str:
    """One cold build of OLMo-core's NumpyPackedFSLDataset over ``tokens`` in a fresh
    interpreter: its result dict, or why it failed (a str)."""
    spec = {
        "tokens": tokens,
        "lengths": tokens + ".lengths.npy",
        "sequence_length": sequence_length,
        "eos": eos,
        "vocab": vocab,
        "metadata": metadata,
        "work_dir": work_dir,
    }
    try:
        return child_result([python, "-I", CHILD, json.dumps(spec)], "OLMo-core build")
    except ChildFailedError as failure:
        return f"fails: {_last_line(str(failure))}"
