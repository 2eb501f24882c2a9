"""One "host" of the shared-cache tests: ``python raw_hosts_child.py CACHE OUT DELAY
SHARDS...`` with ``$MEGADATA_HOST_ID`` set. It builds the raw member over ``SHARDS`` into
``CACHE`` with a tokenizer of ``DELAY`` seconds per text, reads ten batches, waits until
every shard is merged (by whichever host), and writes to ``OUT`` the batches' token sums
and the pieces this process tokenized. With ``$RAW_HOSTS_SHARED`` set, the hosts share
that store (an ``s3://`` prefix) instead of ``CACHE``."""

from __future__ import annotations

import json
import os
import sys
import time

from raw_shards_helpers import batches, slow_factory

import megadata_core as mdc

CONFIG = dict(random_seed=7, sequence_length=32, split="100,0,0", eod_id=256)


def main(argv: list[str]) -> None:
    cache, out, delay, *shards = argv
    raw = mdc.RawShards(shards, slow_factory(float(delay)), window=2, piece_size=4096,
                        shared=os.environ.get("RAW_HOSTS_SHARED") or None)
    config = mdc.GPTDataConfig(blend=([raw], None), path_to_cache=cache, **CONFIG)
    train = mdc.build_datasets(config, [400, None, None])[0]
    sums = [int(batch["tokens"].sum()) for batch in batches(train, 10)]
    corpus = train.corpus
    ends = time.monotonic() + 120
    while not corpus.complete() and time.monotonic() < ends:
        corpus._raise_error()
        corpus.start()
        time.sleep(0.05)
    result = {"sums": sums, "made": corpus.made_here, "complete": corpus.complete()}
    with open(out + ".tmp", "w") as stream:
        json.dump(result, stream)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main(sys.argv[1:])
