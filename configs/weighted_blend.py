"""A weighted blend of three corpora (Megatron's ``--data-path "w1 p1 w2 p2 ..."``),
each split 98/2/0, samples apportioned by weight with Megatron's 0.5% surplus.

    megadata-build-index --config=weighted_blend --dry_run
"""

from megadata_cli.data_config import base_config


def get_config():
    config = base_config()
    config.data_path = (
        "0.5 /data/web_text_document 0.3 /data/code_text_document 0.2 /data/books_text_document"
    )
    config.split = "98,2,0"
    config.sequence_length = 4096
    config.eod_id = 0
    config.path_to_cache = "index_cache"
    config.train_samples = 10_000_000
    config.valid_samples = 100_000
    config.blend_order = "megatron"  # Megatron's exact interleaving ("balanced" is ours)
    return config
