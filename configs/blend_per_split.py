"""Separate corpora per split, with two validation sets reported separately
(Megatron's ``--train-data-path`` / ``--valid-data-path`` / ``--multiple-validation-sets``).

    megadata-build-index --config=blend_per_split --dry_run
"""

from megadata_cli.data_config import base_config


def get_config():
    config = base_config()
    config.train_data_path = "0.7 /data/web_train_text_document 0.3 /data/code_train_text_document"
    config.valid_data_path = "/data/web_valid_text_document /data/code_valid_text_document"
    config.multiple_validation_sets = True
    config.sequence_length = 4096
    config.eod_id = 0
    config.path_to_cache = "index_cache"
    config.train_samples = 1_000_000
    return config
