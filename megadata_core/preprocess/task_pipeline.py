"""The task-plan driver: plan, run the tasks not yet done on an engine, merge in plan order.

:func:`preprocess_tasks` gives the same corpus bytes as :func:`preprocess_jsonl` with
``partitions=1`` (the input order) for any engine, worker count or task size, and is
resumable: a run killed at any moment, rerun with the same command, skips the tasks
whose manifests verify and rebuilds the others (``workdir``).
"""

from __future__ import annotations

import collections
import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import BinaryIO

import numpy as np

from megadata_core.errors import DataError
from megadata_core.files import temporary as temp_files
from megadata_core.files.atomic import write_atomically
from megadata_core.files.interrupts import interrupts_deferred
from megadata_core.format import merge_datasets, optimal_dtype
from megadata_core.preprocess.encoding import MAX_EXAMPLES, SentenceSplitter, Tokenizer
from megadata_core.preprocess.pipeline import (
    PreprocessSummary,
    check_arguments,
    document_prefix,
    make_tokenizer,
)
from megadata_core.preprocess.plan import (
    TableReader,
    fingerprint,
    input_identities,
    is_table,
    plan_command,
    plan_tasks,
)
from megadata_core.preprocess.reading import open_input
from megadata_core.preprocess.remote import is_remote
from megadata_core.preprocess.tasks import Engine, TaskRunner, local_engine
from megadata_core.preprocess.workdir import (
    driver_lock,
    manifest_path,
    open_work_directory,
    remove_strays,
    shard_files,
    shard_prefix,
    staging_for,
    verified_manifest,
    work_directory,
)


def preprocess_tasks(
    inputs: Sequence[str],
    output_prefix: str,
    tokenizer_factory: Callable[[], Tokenizer],
    *,
    task_size: int = 256 << 20,
    engine: Engine | None = None,
    json_keys: Sequence[str] = ("text",),
    append_eod: bool = False,
    skip_bad_lines: bool = False,
    open_binary: Callable[[str], BinaryIO] = open_input,
    table_reader: TableReader | None = None,
    splitter_factory: Callable[[], SentenceSplitter] | None = None,
    merge: bool = True,
    keep_shards: bool = False,
    command: Mapping[str, object] | None = None,
    progress: Callable[[int, int], None] | None = None,
    merge_progress: Callable[[int], object] | None = None,
    keep_empty: bool = False,
) -> PreprocessSummary:
    """Tokenize jsonl (.gz, .zst) and parquet files into ``{output_prefix}_{key}_document``.

    ``task_size`` (bytes) cuts the inputs into tasks (``plan.plan_tasks``); ``engine``
    runs them (default ``local_engine(1)``). Shards and manifests live in
    ``{output_prefix}.work/``; with ``merge`` they are merged in plan order and the
    directory removed (unless ``keep_shards``); without, the shards stay and
    ``{output_prefix}_{key}_{level}.data_args`` lists them (token counts as weights) for
    ``--data_args_path``. ``command`` describes the tokenizer and anything else that
    changes output bytes but that this function cannot see (default: the tokenizer's
    repr, vocab_size and eod_id); a work directory of a different command is refused.
    ``progress(documents, bytes)`` gets running totals after each task;
    ``merge_progress(1)`` is called after each shard is merged (tasks x keys calls).
    ``keep_empty``: Megatron's ``preprocess_data_fast.py`` documents (``preprocess_jsonl``).
    """
    paths, keys = check_arguments(inputs, output_prefix, json_keys, 1, 1, 1)
    output_prefix = os.fspath(output_prefix)
    started = time.perf_counter()
    level = "document" if splitter_factory is None else "sentence"
    tokenizer = make_tokenizer(tokenizer_factory, append_eod)
    dtype = np.dtype(optimal_dtype(int(tokenizer.vocab_size)))
    if splitter_factory is not None:
        splitter_factory()  # a missing splitter fails here, before any work
    if any(is_table(p) for p in paths) and table_reader is None:
        plan_tasks([next(p for p in paths if is_table(p))], task_size)  # raises the DataError
    finals = {key: document_prefix(output_prefix, key, level) for key in keys}
    if merge:  # an unwritable output directory fails before any work
        with staging_for(output_prefix, list(finals.values())):
            pass
    identities = input_identities(paths)
    tasks = plan_tasks(
        paths, task_size, table_reader=table_reader, sizes=[item[1] for item in identities]
    )
    options = {
        "json_keys": keys, "append_eod": bool(append_eod), "skip_bad_lines": bool(skip_bad_lines),
        "level": level, "dtype": dtype.name, "task_size": task_size,
        **({"keep_empty": True} if keep_empty else {}),
        **(dict(command) if command is not None else {
            "tokenizer": repr(tokenizer), "vocab_size": int(tokenizer.vocab_size),
            "eod_id": int(tokenizer.eod_id),
        }),
    }
    plan = plan_command(paths, tasks, options, identities)
    print_ = fingerprint(plan)
    directory = work_directory(output_prefix)
    with driver_lock(directory), contextlib.ExitStack() as stack:  # one driver per directory
        open_work_directory(directory, plan, print_)
        runner = TaskRunner(
            directory, print_, tokenizer_factory, keys, level, dtype, append_eod, skip_bad_lines,
            open_binary, table_reader, splitter_factory, keep_empty,
            objects=[item for item in identities if is_remote(item[0])],
        )
        manifests: dict[int, dict] = {}
        for task in tasks:
            manifest = verified_manifest(directory, task, keys, level, print_)
            if manifest is not None:
                manifests[task.index] = manifest
        remove_strays(directory, _names(directory, [tasks[i] for i in manifests], keys, level))
        pending = [task for task in tasks if task.index not in manifests]
        totals = [0, 0]
        for manifest in manifests.values():
            totals[0] += manifest["documents"]
            totals[1] += manifest["bytes"]
        results = (engine or local_engine(1))(runner, pending)
        if hasattr(results, "close"):  # on the way out at once: an error or Ctrl-C
            stack.callback(results.close)  # stops the engine's workers
        for manifest in results:
            index = manifest.get("index")
            if not (
                isinstance(index, int) and 0 <= index < len(tasks)
                and tasks[index].as_list() == manifest["task"]
            ):
                raise DataError(
                    f"engine returned a manifest of no planned task: {manifest['task']!r}"
                )
            manifests[index] = manifest
            totals[0] += manifest["documents"]
            totals[1] += manifest["bytes"]
            if progress is not None:
                progress(totals[0], totals[1])
        missing = [task.describe() for task in tasks if task.index not in manifests]
        if missing:
            raise DataError(f"engine finished without tasks: {', '.join(missing[:5])}")
        shards = {k: [shard_prefix(directory, task, k, level) for task in tasks] for k in keys}
        summary = _summary(tasks, manifests, keys, started, finals)
        if merge:
            with staging_for(output_prefix, list(finals.values())) as staging:
                for key in keys:
                    merge_datasets(shards[key], staging.staged(finals[key]),
                                   progress=merge_progress)
                staging.publish(list(finals.values()))
            if keep_shards:
                summary.partition_prefixes = shards
            else:
                with contextlib.suppress(FileNotFoundError), interrupts_deferred():
                    temp_files.remove_tree(directory)
        else:
            remove_strays(directory, _names(directory, tasks, keys, level))
            for key in keys:
                path = f"{finals[key]}.data_args"
                write_data_args(path, shards[key], tasks, manifests, key)
                summary.data_args_paths[key] = path
            summary.output_prefixes = {}  # nothing written under the corpus names
            summary.partition_prefixes = shards
        summary.seconds = time.perf_counter() - started
        return summary


def write_data_args(
    path: str, prefixes: Sequence[str], tasks, manifests: Mapping[int, dict], key: str
) -> None:
    """'weight prefix' pairs (token counts as weights; shards with no tokens left out)."""
    lines = [
        f"{manifests[task.index]['tokens'][key]} {prefix}\n"
        for task, prefix in zip(tasks, prefixes)
        if manifests[task.index]["tokens"][key] > 0
    ]
    text = "".join(lines).encode("utf-8")
    write_atomically(path, lambda stream: stream.write(text))


def _names(directory: str, tasks, keys, level) -> set[str]:
    names = set()
    for task in tasks:
        names.add(os.path.basename(manifest_path(directory, task)))
        names.update(os.path.basename(p) for p in shard_files(directory, task, keys, level))
    return names


def _summary(tasks, manifests, keys, started, finals) -> PreprocessSummary:
    bad: collections.Counter[str] = collections.Counter()
    examples: list[str] = []
    tokens = dict.fromkeys(keys, 0)
    for task in tasks:
        manifest = manifests[task.index]
        bad.update(manifest["bad_lines"])
        examples.extend(manifest["bad_examples"][: MAX_EXAMPLES - len(examples)])
        for key in keys:
            tokens[key] += manifest["tokens"][key]
    return PreprocessSummary(
        documents=sum(manifests[t.index]["documents"] for t in tasks),
        tokens=sum(tokens.values()),
        tokens_per_key=tokens,
        bad_lines=sum(bad.values()),
        bad_line_kinds=dict(bad),
        bad_line_examples=examples,
        blank_lines=sum(manifests[t.index]["blank_lines"] for t in tasks),
        bytes=sum(manifests[t.index]["bytes"] for t in tasks),
        seconds=time.perf_counter() - started,
        output_prefixes=finals,
        partition_prefixes={key: [] for key in keys},
    )

