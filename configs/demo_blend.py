"""The demo's blend (what tools/demo.py builds): its two standard-library corpora, module
sources and their docstrings, weighted 0.7/0.3 and split 98/2/0, sharing its index cache.

    megadata-inspect config --config=demo_blend
"""

from megadata_cli.data_config import base_config


def get_config():
    config = base_config()
    config.data_path = (
        "0.7 demo_output/stdlib_text_document 0.3 demo_output/stdlib_docs_text_document"
    )
    config.split = "98,2,0"
    config.sequence_length = 1024
    config.eod_id = 256
    config.path_to_cache = "demo_output/index_cache"
    config.create_attention_mask = False
    config.train_samples = 20_000
    config.valid_samples = 500
    return config
