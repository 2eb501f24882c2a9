"""torchtitan 0.3's own train loop on the CPU with megadata's loader: llama3 debugmodel
trains a few steps on a megadata corpus (best_fit packing, document masking: flex
attention's block-causal masks built from the loader's ``positions``), checkpoints with
torchtitan's checkpointer, is killed (SIGKILL) and resumes: the batches after the resume
are those an uninterrupted run took, and so are the losses.

The trainer runs in subprocesses with ``tests/trainers/torchtitan_site`` on PYTHONPATH:
its ``sitecustomize`` applies the CPU patches outside torchtitan's files (see there; on
the CPU flex attention runs as dense attention with the same block mask, torch having no
CPU backward for it);
``train_megadata.py`` there drives ``Trainer`` as torchtitan's ``train.py`` does. Skipped
where torchtitan does not import (run with ``.venv-torchtitan``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
try:
    import tokenizers
    import torchtitan.components.dataloader  # noqa: F401
except Exception as error:  # noqa: BLE001
    pytest.skip(f"torchtitan is not importable here ({error!r}); run this file with "
                ".venv-torchtitan", allow_module_level=True)

from gpt_oracle import write_corpus  # noqa: E402

SITE = Path(__file__).resolve().parent / "torchtitan_site"
VOCAB = 2048  # llama3 debugmodel's
EOS = 3


def write_tokenizer(directory: Path) -> Path:
    """A word-level HF tokenizer (tokenizer.json + tokenizer_config.json) made offline
    with the ``tokenizers`` library: what torchtitan's HuggingFaceTokenizer loads from
    ``hf_assets_path``; ``</s>`` (id 3) is the corpus's EOD."""
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    vocab = {"<unk>": 0, "<s>": 1, "<pad>": 2, "</s>": EOS}
    vocab.update({f"w{i}": i for i in range(4, VOCAB)})
    tokenizer = tokenizers.Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = WhitespaceSplit()
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}))
    return directory


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def environment() -> dict[str, str]:
    return {**os.environ, "LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1",
           "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()),
           "PYTHONPATH": os.pathsep.join([str(SITE), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "2", "WANDB_MODE": "disabled"}


def train(tmp: Path, dump: str, *extra: str) -> subprocess.CompletedProcess:
    env = environment()
    command = [sys.executable, str(SITE / "train_megadata.py"), "--corpus",
               str(tmp / "corpus"), "--tokenizer", str(tmp / "tokenizer"), "--dump",
               str(tmp / dump), "--steps", "6", "--checkpoint-interval", "2", *extra]
    return subprocess.run(command, env=env, cwd=tmp, capture_output=True, text=True,
                          timeout=600)


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("titan-train")
    rng = np.random.default_rng(5)
    write_corpus(str(tmp / "corpus"), rng.integers(2, 40, 300), rng, vocab=VOCAB, eod=EOS)
    write_tokenizer(tmp / "tokenizer")
    return tmp


def test_train_checkpoint_kill_resume(workdir):
    reference = train(workdir, "reference")
    assert reference.returncode == 0, reference.stderr[-6000:]
    want = records(workdir / "reference" / "batches.jsonl")
    assert [r["batch"] for r in want] == [1, 2, 3, 4, 5, 6]
    assert all(r["documents"] > 2 for r in want)  # packed documents, masked apart

    killed = train(workdir, "run", "--kill-at-step", "5")
    assert killed.returncode == -9, killed.stderr[-6000:]
    assert (workdir / "run" / "checkpoint" / "step-4").is_dir()
    resumed = train(workdir, "run")
    assert resumed.returncode == 0, resumed.stderr[-6000:]
    assert "Training starts at step 5" in resumed.stderr + resumed.stdout

    got = records(workdir / "run" / "batches.jsonl")
    assert got == want  # steps 1-4 before the kill, 5-6 after the resume: the same
    ref_loss = {r["step"]: r["loss"] for r in records(workdir / "reference" / "losses.jsonl")}
    run_loss = {r["step"]: r["loss"] for r in records(workdir / "run" / "losses.jsonl")}
    assert sorted(run_loss) == sorted(ref_loss) == [1, 2, 3, 4, 5, 6]
    for step in ref_loss:
        assert run_loss[step] == pytest.approx(ref_loss[step], rel=1e-5), step


def test_torchtitans_own_command_line(workdir):
    """``python -m torchtitan.train`` (torchtitan's entry point and ConfigManager, tyro
    flags for the loader's Config fields) with the config function this adapter ships."""
    command = [
        sys.executable, "-m", "torchtitan.train",
        "--module", "megadata_adapters.trainers.torchtitan",
        "--config", "llama3_debugmodel_megadata",
        "--dataloader.dataset-path", str(workdir / "corpus"),
        "--dataloader.train-samples", "40",
        "--hf-assets-path", str(workdir / "tokenizer"),
        "--dump-folder", str(workdir / "cli"),
        "--training.steps", "2", "--training.seq-len", "64",
        "--training.local-batch-size", "2",
        "--validator.no-enable", "--checkpoint.no-enable",
    ]
    run = subprocess.run(command, env=environment(), cwd=workdir, capture_output=True,
                         text=True, timeout=600)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-6000:]
    assert "step:  2" in log and "Training completed" in log


def test_docs_torchtitan_blocks_run_as_written(tmp_path):
    """docs/trainers.md's torchtitan section runs as written (docs_sections.run_section),
    with the CPU harness (torchtitan_site) on PYTHONPATH."""
    from docs_sections import run_section

    env = {**os.environ, "OMP_NUM_THREADS": "2", "WANDB_MODE": "disabled",
           "PYTHONPATH": os.pathsep.join([str(SITE), os.environ.get("PYTHONPATH", "")])}
    outputs = run_section("torchtitan", tmp_path, env)
    assert len(outputs) == 3  # the corpus and tokenizer, the loader, the trainer
    assert "cu_seqlens" in outputs[1] and "megadata" in outputs[1]
    assert "step:  2" in outputs[2] and "Training completed" in outputs[2]
