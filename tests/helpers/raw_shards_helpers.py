"""Raw JSON-lines shards written on the spot, tokenizers of injected speed, and the child
process of the kill tests (``python raw_shards_helpers.py CACHE SHARDS... -- ...``)."""

from __future__ import annotations

import gzip
import json
import os
import random
import sys
import time

import numpy as np

from megadata_core.preprocess import ByteTokenizer


def write_shards(directory, counts=(300, 200, 350), seed: int = 0, gz: tuple = ()) -> list[str]:
    """Shards ``shard{k}.jsonl`` (``.jsonl.gz`` for k in ``gz``) of ``counts[k]`` documents
    of 1-300 characters (unicode, an empty text now and then); their paths."""
    rng = random.Random(seed)
    alphabet = "abcdefghij klmnopqrstuvwxyz ÄÖÜ 東京 😀\n"
    paths = []
    for k, count in enumerate(counts):
        lines = []
        for d in range(count):
            length = 0 if rng.random() < 0.02 else rng.randint(1, 300)
            text = "".join(rng.choice(alphabet) for _ in range(length))
            lines.append(json.dumps({"text": f"{k}:{d} {text}" if length else ""}) + "\n")
        data = "".join(lines).encode()
        name = f"shard{k}.jsonl" + (".gz" if k in gz else "")
        path = os.path.join(directory, name)
        with open(path, "wb") as stream:
            stream.write(gzip.compress(data, mtime=0) if k in gz else data)
        paths.append(path)
    return paths


class SlowBytes(ByteTokenizer):
    """Bytes, ``delay`` seconds per text (jittered by ``jitter``): a slow tokenizer whose
    ids equal the fast one's."""

    def __init__(self, delay: float = 0.0005, jitter: float = 0.0) -> None:
        self.delay, self.jitter = delay, jitter
        self._random = random.Random(os.getpid())

    def encode(self, text: str) -> np.ndarray:
        time.sleep(self.delay + self.jitter * self._random.random())
        return super().encode(text)

    def __repr__(self) -> str:
        return "ByteTokenizer()"  # the same tokens: the same cache directory


def slow_factory(delay: float = 0.0005, jitter: float = 0.0):
    import functools

    return functools.partial(SlowBytes, delay, jitter)


def batches(dataset, count: int, size: int = 4, start: int = 0) -> list[dict]:
    return [dataset.__getitems__(list(range(start + i * size, start + (i + 1) * size)))
            for i in range(count)]


def main(argv: list[str]) -> None:
    """Child: build the raw member over ``shards`` into ``cache`` with a slow tokenizer
    (``workers`` processes; 0: the producer thread), print a line per batch read, then
    keep producing until killed."""
    import signal

    import megadata_core as mdc

    # A trainer's Ctrl-C: Python's own handler, SIGINT not blocked (a parent that ignores
    # or blocks SIGINT, as a test runner's worker may, leaves it so in the child).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    cache, window, workers, *shards = argv
    raw = mdc.RawShards(shards, slow_factory(0.002), window=int(window), piece_size=4096,
                        workers=int(workers) or None)
    config = mdc.GPTDataConfig(random_seed=7, sequence_length=32, blend=([raw], None),
                               split="100,0,0", path_to_cache=cache, eod_id=256)
    train = mdc.build_datasets(config, [400, None, None])[0]
    for batch in batches(train, 3):
        print(int(batch["tokens"].sum()), flush=True)
    print("read", flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main(sys.argv[1:])
