"""One tokenized corpus split 969/30/1 into train/valid/test (Megatron's default split).

    python tools/build_index.py --config=configs/single_corpus.py \
        --config.data_path=/data/corpus_text_document --config.train_samples=1000000
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "tools"))
from data_config import base_config  # noqa: E402


def get_config():
    config = base_config()
    config.data_path = "/data/corpus_text_document"
    config.split = "969,30,1"
    config.sequence_length = 4096
    config.eod_id = 0
    config.path_to_cache = "index_cache"
    config.train_samples = 1_000_000
    config.valid_samples = 10_000
    config.test_samples = 1_000
    return config
