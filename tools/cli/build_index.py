r"""Build every split's GPT indices into the cache ahead of training (Megatron's
``prepare_cache.py``), then print what each split holds.

    megadata-build-index --config=weighted_blend \
        --config.sequence_length=2048 [--dry_run]
    megadata-build-index --config=single_corpus \
        --data_path="0.3 /a/prefix 0.7 /b/prefix" --split=98,2,0

Megatron's data flags (``--data_path``, ``--split``, ``--train_data_path``,
``--valid_data_path``, ``--test_data_path``, ``--data_args_path``,
``--per_split_data_args_path``) and ``--train_samples`` / ``--valid_samples`` /
``--test_samples`` override the config: a data path flag replaces the config's whole blend
(and its split, unless ``--split`` is given too); ``--split`` alone splits the config's
own data. ``--dry_run`` prints the tables a build prints (samples requested and built,
epochs, tokens of every dataset), computed from the .idx files without building anything;
only the realized blend shares need a build. A bad config exits with status 1 and a one-line
``error:`` message.
"""

from __future__ import annotations

import sys
import time

from absl import app, flags

from megadata_cli import data_flags, tool_main
from megadata_cli.split_tables import (
    build_splits,
    built_tables,
    plan_splits,
    planned_tables,
    print_tables,
)
from megadata_core import DataError

FLAGS = flags.FLAGS
data_flags.define()
flags.adopt_module_key_flags(data_flags)
flags.DEFINE_bool(
    "dry_run", False, "Print the tables the build would print, from the .idx files alone "
    "(nothing is built or written)."
)
flags.DEFINE_bool(
    "progress", True, "Show a progress bar while building (on a terminal only; "
    "--noprogress: never)."
)


def run() -> int:
    config, sizes, extras = data_flags.gpt_config()
    recipes = plan_splits(config, sizes, extras)
    if FLAGS.dry_run:
        if recipes is None:
            print("mock data: nothing to plan")
        else:
            print(f"dry run: nothing built; cache: {config.path_to_cache}")
            print_tables(planned_tables(recipes, config), sizes, config)
        return 0
    start = time.perf_counter()
    datasets = build_splits(config, sizes, extras, recipes, FLAGS.progress)
    print(f"built in {time.perf_counter() - start:.2f} s; cache: {config.path_to_cache}")
    print_tables(built_tables(datasets), sizes, config)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    try:
        return run()
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


def cli() -> None:
    """The console script: parse ``sys.argv`` and run."""
    tool_main.run(main)


if __name__ == "__main__":
    cli()
