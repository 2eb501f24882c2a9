"""One tokenized corpus split 969/30/1 into train/valid/test (Megatron's default split).

    megadata-build-index --config=single_corpus \
        --config.data_path=/data/corpus_text_document --config.train_samples=1000000
"""

from megadata_cli.data_config import base_config


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
