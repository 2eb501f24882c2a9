"""Train torchtitan 0.3's llama3 debug model a few steps with megadata's loader (run with
this folder on PYTHONPATH, so ``sitecustomize`` applies the CPU patches, and
``LOCAL_RANK=0 RANK=0 WORLD_SIZE=1``)::

    python train_megadata.py --corpus PREFIX --tokenizer DIR --dump DIR --steps 6 \
        [--kill-at-step 5] [--checkpoint-interval 2]

Every batch the trainer takes from the loader is recorded (one JSON line per batch:
the step it was taken for, sha256 of its input, positions and labels) in
``DUMP/batches.jsonl``, and each step's loss in ``DUMP/losses.jsonl``. ``--kill-at-step
K`` ends the process with SIGKILL when the trainer asks for step K's batch (after step
K-1 and its checkpoint), as a crash would. torchtitan's trainer, checkpointer and loader
interface are used as they are; the recording is a subclass of megadata's own loader.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
from dataclasses import dataclass

import torch

from megadata_adapters.trainers.torchtitan import MegadataDataLoader


def digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.contiguous().numpy().tobytes()).hexdigest()[:16]


class RecordingLoader(MegadataDataLoader):
    """megadata's loader, recording each batch it yields (and killing on request)."""

    @dataclass(kw_only=True, slots=True)
    class Config(MegadataDataLoader.Config):
        record: str = ""
        kill_at_batch: int = 0  # 1-based ordinal of the batch (across runs) to die at

    def __iter__(self):
        taken = json.loads(self.state_dict()["megadata"])["consumed_samples"]
        ordinal = taken // (self.local_batch_size * self.dp_world_size)
        for input_dict, labels in super().__iter__():
            ordinal += 1
            if ordinal == self.config.kill_at_batch:
                os.kill(os.getpid(), signal.SIGKILL)
            with open(self.config.record, "a", encoding="utf-8") as file:
                file.write(json.dumps({
                    "batch": ordinal,
                    "input": digest(input_dict["input"]),
                    "positions": digest(input_dict["positions"]),
                    "labels": digest(labels),
                    "documents": int((input_dict["positions"] == 0).sum()),
                }) + "\n")
            yield input_dict, labels


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--dump", required=True)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--checkpoint-interval", type=int, default=2)
    parser.add_argument("--kill-at-step", type=int, default=0)
    parser.add_argument("--attn", default="flex", choices=["flex", "sdpa", "varlen"])
    args = parser.parse_args()

    from torchtitan.models.llama3 import model_registry
    from torchtitan.models.llama3.config_registry import llama3_debugmodel
    from torchtitan.tools.logging import init_logger

    init_logger()
    config = llama3_debugmodel()
    if args.attn != "flex":
        config.model_spec = model_registry("debugmodel", attn_backend=args.attn)
    config.hf_assets_path = args.tokenizer
    config.dump_folder = args.dump
    config.training.steps = args.steps
    config.training.seq_len = args.seq_len
    config.training.local_batch_size = args.batch
    config.validator.enable = False
    config.debug.seed = 0  # the same initial weights in every run
    config.checkpoint.enable = True
    config.checkpoint.interval = args.checkpoint_interval
    config.checkpoint.folder = "checkpoint"
    config.checkpoint.last_save_model_only = False
    config.metrics.enable_tensorboard = False
    config.dataloader = RecordingLoader.Config(
        dataset_path=args.corpus, packing="best_fit", document_masking=True,
        record=os.path.join(args.dump, "batches.jsonl"),
        kill_at_batch=args.kill_at_step,  # one batch per step (no grad accumulation)
    )
    trainer = config.build()
    losses = os.path.join(args.dump, "losses.jsonl")
    log = trainer.metrics_processor.log

    def log_loss(step, global_avg_loss, *rest, **kwargs):
        with open(losses, "a", encoding="utf-8") as file:
            file.write(json.dumps({"step": step, "loss": float(global_avg_loss)}) + "\n")
        return log(step, global_avg_loss, *rest, **kwargs)

    trainer.metrics_processor.log = log_loss
    try:
        trainer.train()
    finally:
        trainer.close()
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
