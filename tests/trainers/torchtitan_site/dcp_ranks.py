"""One DP rank of a multi-process DCP round trip of megadata's torchtitan loader (gloo):
``python dcp_ranks.py CORPUS CHECKPOINT OUT`` with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT set. Takes 3 batches, saves ``{"dataloader": loader}`` with DCP (each rank
its own loader, as torchtitan's checkpointer does), takes 2 more; then a fresh loader
loads the checkpoint and takes 2: OUT (JSON) gets both pairs' digests and the state."""

from __future__ import annotations

import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from megadata_adapters.trainers.torchtitan import MegadataDataLoader


class Tokenizer:
    eos_id = 3


def digest(batch) -> str:
    inputs, labels = batch
    parts = [inputs["input"], inputs["positions"], labels]
    return hashlib.sha256(b"".join(t.numpy().tobytes() for t in parts)).hexdigest()[:16]


def build(corpus: str, rank: int, world: int):
    return MegadataDataLoader.Config(
        dataset_path=corpus, packing="best_fit", document_masking=True
    ).build(dp_world_size=world, dp_rank=rank, tokenizer=Tokenizer(), seq_len=32,
            local_batch_size=2, snapshot_every_n_steps=1)


def main() -> None:
    corpus, checkpoint, out = sys.argv[1:4]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    loader = build(corpus, rank, world)
    iterator = iter(loader)
    first = [digest(next(iterator)) for _ in range(3)]
    dcp.save({"dataloader": loader}, checkpoint_id=checkpoint)
    following = [digest(next(iterator)) for _ in range(2)]
    again = build(corpus, rank, world)
    dcp.load({"dataloader": again}, checkpoint_id=checkpoint)
    resumed = [digest(batch) for _, batch in zip(range(2), again)]
    with open(out, "w", encoding="utf-8") as file:
        json.dump({"rank": rank, "first": first, "following": following,
                   "resumed": resumed, "state": loader.state_dict()["megadata"]}, file)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
