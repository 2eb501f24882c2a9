"""The demo's data: the standard-library corpus that tools/demo.py tokenizes, with the
byte tokenizer's EOD id, short samples and a small cache next to it.

    megadata-build-index --config=demo
"""

from megadata_cli.data_config import base_config


def get_config():
    config = base_config()
    config.data_path = "demo_output/stdlib_text_document"
    config.split = "90,8,2"
    config.sequence_length = 1024
    config.eod_id = 256
    config.path_to_cache = "demo_output/index_cache"
    config.create_attention_mask = False
    config.train_samples = 20_000
    config.valid_samples = 1_000
    config.test_samples = 200
    return config
