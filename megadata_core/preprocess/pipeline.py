"""The preprocessing driver: JSON-lines (and parquet) to Megatron ``.bin/.idx`` corpora.

Each non-blank input line is a JSON object; for every key in ``json_keys`` its
string value is tokenized into one document holding one sequence (plus the EOD
id when ``append_eod``), written to ``{output_prefix}_{key}_document.bin/.idx``;
with a sentence splitter, one sequence per sentence, written to
``{output_prefix}_{key}_sentence.bin/.idx``. As in Megatron's encoder, a text that
tokenizes to nothing gives a document with zero sequences (and no EOD).

:func:`preprocess_tasks` plans the inputs into tasks (``plan``), runs the tasks not yet
done on an engine (``tasks``), and merges the shards in plan order, so the output bytes
do not depend on the engine, the worker count or the task size. With a ``task_size`` the
shards live in ``{output_prefix}.work/``, a killed run, rerun, resumes (``workdir``), and
several drivers (on machines sharing it) split the tasks by claims, one of them merging;
without, in the run's staging directory. :func:`preprocess_jsonl` is the same driver on
this machine's processes.
Only numpy and the standard library are used here; real tokenizers live in
``adapters/tokenizing/text_tokenizers.py`` and reach this module as zero-argument factories.
"""

from __future__ import annotations

import collections
import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np

from megadata_core.errors import DataError
from megadata_core.files import atomic as temp_files
from megadata_core.files.atomic import interrupts_deferred, write_atomically
from megadata_core.files.claims import Claims, default_lease, host_owner
from megadata_core.format import IndexedDataset, merge_datasets, optimal_dtype
from megadata_core.format.reader import bin_path_of, idx_path_of
from megadata_core.format.roles import ROLES_SUFFIX, roles_prefix
from megadata_core.preprocess.conversations import is_conversational, output_keys
from megadata_core.preprocess.encoding import MAX_EXAMPLES, SentenceSplitter, Tokenizer
from megadata_core.preprocess.plan import (
    TableReader,
    fingerprint,
    input_identities,
    is_table,
    plan_command,
    plan_parts,
    plan_tasks,
)
from megadata_core.preprocess.reading import open_input
from megadata_core.preprocess.remote import is_remote
from megadata_core.preprocess.tasks import (
    CHUNK_BYTES,
    CHUNK_LINES,
    Engine,
    TaskRunner,
    local_engine,
)
from megadata_core.preprocess.workdir import (
    driver_lock,
    manifest_path,
    open_work_directory,
    remove_strays,
    remove_task_partials,
    shard_files,
    shard_prefix,
    staging_for,
    verified_manifest,
    work_directory,
)

#: Bytes per task of a run without ``task_size`` (a file smaller is one task).
_DEFAULT_TASK_SIZE = 256 << 20
#: In a work directory: the claims of its tasks and merge, and the mark of a published run.
_CLAIMS, _PUBLISHED = "claims", "published.json"


@dataclass
class PreprocessSummary:
    """What ``preprocess_tasks`` did."""

    documents: int
    tokens: int  # over all keys, EOD included
    tokens_per_key: dict[str, int]
    bad_lines: int
    bad_line_kinds: dict[str, int]
    bad_line_examples: list[str]
    blank_lines: int
    bytes: int  # raw input bytes read (decompressed)
    seconds: float
    output_prefixes: dict[str, str]  # key -> prefix of its .bin/.idx
    partition_prefixes: dict[str, list[str]]  # key -> kept shard prefixes (keep_partitions)
    # key -> the data-args file listing the shards, when they were left unmerged (no
    # output_prefixes then)
    data_args_paths: dict[str, str] = field(default_factory=dict)

    @property
    def documents_per_second(self) -> float:
        return self.documents / self.seconds if self.seconds > 0 else 0.0

    @property
    def megabytes_per_second(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


def document_prefix(output_prefix: str, key: str, level: str = "document") -> str:
    """Megatron's output naming: ``{output_prefix}_{key}_{level}`` (document or sentence)."""
    return f"{output_prefix}_{key}_{level}"


def _check_arguments(
    inputs: Sequence[str], json_keys: Sequence[str], partitions: int, chunk_lines: int
) -> tuple[list[str], list[str]]:
    """The input paths and JSON keys, checked with the other arguments of a run
    (DataError naming the argument)."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    paths = [os.fspath(path) for path in inputs]
    if not paths:
        raise DataError("inputs: no input files given")
    for path in paths:
        if "://" not in path and not os.path.isfile(path):
            what = "is a directory, not a file" if os.path.isdir(path) else "not found"
            raise DataError(f"{path}: input file {what}")
    if isinstance(json_keys, str):
        json_keys = [json_keys]
    keys = list(json_keys)
    if not keys:
        raise DataError("json_keys: no keys given")
    if len(set(keys)) != len(keys) or not all(isinstance(k, str) and k for k in keys):
        raise DataError(f"json_keys: {keys!r} must be distinct non-empty strings")
    for name, value in (("partitions", partitions), ("chunk_lines", chunk_lines)):
        if not isinstance(value, int) or value < 1:
            raise DataError(f"{name}: {value!r} must be an integer >= 1")
    return paths, keys


def preprocess_jsonl(
    inputs: Sequence[str],
    output_prefix: str,
    tokenizer_factory: Callable[[], Tokenizer],
    *,
    workers: int = 1,
    start_method: str | None = None,
    **options: Any,
) -> PreprocessSummary:
    """:func:`preprocess_tasks` on ``local_engine(workers, start_method)``: ``workers``
    processes of this machine (one task's blocks spread over all of them when there are
    fewer tasks than processes)."""
    return preprocess_tasks(inputs, output_prefix, tokenizer_factory,
                            engine=local_engine(workers, start_method), **options)


def preprocess_tasks(
    inputs: Sequence[str],
    output_prefix: str,
    tokenizer_factory: Callable[[], Tokenizer],
    *,
    task_size: int | None = None,
    engine: Engine | None = None,
    json_keys: Sequence[str] = ("text",),
    append_eod: bool = False,
    skip_bad_lines: bool = False,
    open_binary: Callable[[str], BinaryIO] = open_input,
    table_reader: TableReader | None = None,
    splitter_factory: Callable[[], SentenceSplitter] | None = None,
    partitions: int = 1,
    keep_sequential_samples: bool = False,
    keep_partitions: bool = False,
    merge: bool = True,
    keep_shards: bool = False,
    command: Mapping[str, object] | None = None,
    progress: Callable[[int, int], None] | None = None,
    merge_progress: Callable[[int], object] | None = None,
    keep_empty: bool = False,
    claim_batch: int | None = None,
    chunk_lines: int = CHUNK_LINES,
    chunk_bytes: int = CHUNK_BYTES,
) -> PreprocessSummary:
    """Tokenize jsonl (.gz, .zst) and parquet files into ``{output_prefix}_{key}_document``.

    ``tokenizer_factory`` is a picklable zero-argument callable returning a Tokenizer;
    each process calls it once. Tokens are stored as ``optimal_dtype(vocab_size)``.
    ``splitter_factory`` (picklable) gives a SentenceSplitter: one sequence per
    sentence, outputs named ``..._sentence``. ``engine`` runs the tasks (default
    ``local_engine(1)``), each read in blocks of about ``chunk_bytes`` (at most
    ``chunk_lines`` lines).

    ``task_size`` (bytes) cuts the inputs into tasks (``plan.plan_tasks``) whose shards
    and manifests live in ``{output_prefix}.work/``: a killed run, rerun with the same
    command, skips the tasks whose manifests verify. ``merge`` merges them in plan order
    and removes the directory (unless ``keep_shards``); without, the shards stay and
    ``{output_prefix}_{key}_{level}.data_args`` lists them (token counts as weights) for
    ``--data_args_path``. ``command`` describes the tokenizer and anything else that
    changes output bytes but that this function cannot see (default: the tokenizer's
    repr, vocab_size and eod_id); a work directory of a different command is refused.
    Without ``task_size`` (tasks of 256 MB) the shards live in the run's
    staging directory: nothing is kept after a kill.

    ``partitions`` K > 1 is Megatron's ``--partitions``: input line i (0-based over all
    inputs, blank lines counted) goes to partition i mod K, so the corpus holds lines
    0, K, 2K, ..., then 1, K+1, ...; with ``keep_sequential_samples`` partition k holds
    lines [k*ceil(n/K), (k+1)*ceil(n/K)) and the corpus keeps the input order. The plan
    counts each task's lines (one extra read); each task writes one shard per partition,
    merged in (partition, task) order. ``keep_partitions`` keeps the partitions as
    ``{output_prefix}_{k}_{key}_{level}``. ``keep_empty`` writes what Megatron's
    ``preprocess_data_fast.py`` writes: a text that tokenizes to nothing is a document of
    one empty sequence, and every document gets the EOD.

    ``progress(documents, bytes)`` gets running totals after each block of a task run in
    this process, else after each task; ``merge_progress(1)`` after each shard merged.
    With a ``task_size`` several drivers (on machines sharing the file system) may run the
    same command at once: each claims up to ``claim_batch`` tasks at a time (None: every
    free task, one engine call as a driver alone makes; several drivers want their own
    parallelism here)
    (``{output_prefix}.work/claims/``, lease ``$MEGADATA_CLAIM_LEASE_S``, default 30 s),
    runs them on its engine, skips tasks others hold or finished, and takes over a task
    whose holder stopped beating; the holder of the ``merge`` claim merges and publishes,
    the others wait for that and return the same summary.

    Outputs get their final names only at the end (``workdir.Staging``), so on any error,
    or after a kill, nothing corpus-like is left; an output directory that cannot be
    written is a DataError before any tokenizing.
    """
    paths, keys = _check_arguments(inputs, json_keys, partitions, chunk_lines)
    if partitions > 1 and not merge:
        raise DataError(f"partitions: {partitions} orders the merged corpus; without merging "
                        "(no_merge) there is none to order")
    if task_size is None and not (merge and not keep_shards):
        raise DataError("no_merge, keep_shards: keep the work directory, so they need a "
                        "task_size (the resumable plan)")
    output_prefix = os.fspath(output_prefix)
    started = time.perf_counter()
    level = "document" if splitter_factory is None else "sentence"
    finals = {key: document_prefix(output_prefix, key, level) for key in keys}
    kept = {key: [document_prefix(f"{output_prefix}_{k}", key, level)
                  for k in range(partitions if keep_partitions and partitions > 1 else 0)]
            for key in keys}
    names = [*finals.values(), *sum(kept.values(), [])]
    if task_size is not None and merge:  # an unwritable output directory fails before any work
        with staging_for(output_prefix, names):
            pass
    with contextlib.ExitStack() as run:  # without task_size: the staging is the work directory
        staging = None if task_size is not None else run.enter_context(
            staging_for(output_prefix, names))
        directory = work_directory(output_prefix) if staging is None else staging.path
        tokenizer = _make_tokenizer(tokenizer_factory, append_eod)
        json_keys, keys = keys, list(output_keys(keys, tokenizer))  # the corpora written
        if is_conversational(tokenizer):
            _check_conversational(tokenizer, json_keys, splitter_factory, keep_empty)
            for key in keys[len(json_keys):]:  # each key's roles, beside its tokens
                tokens_key = key[: -len(ROLES_SUFFIX)]
                finals[key] = roles_prefix(finals[tokens_key])
                kept[key] = [roles_prefix(prefix) for prefix in kept[tokens_key]]
            names = [*finals.values(), *sum(kept.values(), [])]
            longest = max((os.path.basename(p) for p in names), key=len)
            temp_files.check_name_fits(os.path.dirname(os.path.abspath(output_prefix)),
                                       f"{longest}.idx", "output_prefix")
        dtype = np.dtype(optimal_dtype(int(tokenizer.vocab_size)))
        if splitter_factory is not None:
            splitter_factory()  # a missing splitter fails here, before any work
        if any(is_table(p) for p in paths) and table_reader is None:
            plan_tasks([next(p for p in paths if is_table(p))], 1)  # raises the DataError
        size = _DEFAULT_TASK_SIZE if task_size is None else task_size
        identities = input_identities(paths)
        tasks = plan_tasks(
            paths, size, table_reader=table_reader, sizes=[item[1] for item in identities]
        )
        runner = TaskRunner(
            directory, "", tokenizer_factory, json_keys, level, dtype, append_eod,
            skip_bad_lines,
            open_binary, table_reader, splitter_factory, keep_empty,
            objects=[item for item in identities if is_remote(item[0])],
            chunk_lines=chunk_lines, chunk_bytes=chunk_bytes,
        )
        runner.digests = task_size is not None
        runner.outputs = tuple(keys)
        runner.parts = plan_parts(tasks, partitions, keep_sequential_samples, runner.lines)
        options = {
            "json_keys": json_keys, "append_eod": bool(append_eod),
            "skip_bad_lines": bool(skip_bad_lines), "level": level, "dtype": dtype.name,
            "task_size": size,
            **({"keep_empty": True} if keep_empty else {}),
            **({"partitions": [partitions, bool(keep_sequential_samples)]}
               if partitions > 1 else {}),
            **(dict(command) if command is not None else {
                "tokenizer": repr(tokenizer), "vocab_size": int(tokenizer.vocab_size),
                "eod_id": int(tokenizer.eod_id),
            }),
        }
        plan = plan_command(paths, tasks, options, identities)
        runner.fingerprint = fingerprint(plan)
        claims = None
        if staging is None:  # a shared work directory: tasks by claims
            if claim_batch is not None and (not isinstance(claim_batch, int)
                                            or claim_batch < 1):
                raise DataError(f"claim_batch: {claim_batch!r} must be an integer >= 1")
            open_work_directory(directory, plan, runner.fingerprint)
            with contextlib.suppress(FileNotFoundError):  # a rerun merges again
                os.unlink(os.path.join(directory, _PUBLISHED))
            claims = Claims(os.path.join(directory, _CLAIMS), default_lease(), owner=host_owner())
            run.callback(claims.close)
        else:
            run.enter_context(driver_lock(directory))  # the staging's one driver
        summary, manifests = _run_plan(runner, tasks, plan, engine, progress, started, finals,
                                       claims, claim_batch)
        if manifests is None:
            return summary
        order = [(k, task) for k in ([None] if partitions == 1 else range(partitions))
                 for task in tasks]
        shards = {key: [shard_prefix(directory, task, key, level, k) for k, task in order]
                  for key in keys}
        if claims is not None and not _take_merge(claims, directory, finals, merge, keys):
            summary.partition_prefixes = shards if (keep_shards or not merge) else kept
            if not merge:
                summary.data_args_paths = {key: f"{finals[key]}.data_args" for key in keys}
                summary.output_prefixes = {}
            summary.seconds = time.perf_counter() - started
            return summary  # merged and published by another driver
        if not merge:
            remove_strays(directory, _names(directory, tasks, keys, level, 1)
                          | {_CLAIMS, _PUBLISHED})
            for key in keys:
                path = f"{finals[key]}.data_args"
                _write_data_args(path, shards[key], tasks, manifests, key)
                summary.data_args_paths[key] = path
            summary.output_prefixes = {}  # nothing written under the corpus names
            summary.partition_prefixes = shards
            _mark_published(directory, runner.fingerprint)
            return summary
        with staging_for(output_prefix, names) if staging is None else \
                contextlib.nullcontext(staging) as out:
            for key in keys:
                _merge(out, shards[key], kept[key], finals[key], merge_progress,
                       movable=staging is not None)
            out.publish(names)
            summary.partition_prefixes = shards if keep_shards else kept
        if claims is not None:
            _mark_published(directory, runner.fingerprint)
        if task_size is not None and not keep_shards:
            if claims is not None:
                claims.close()  # (no beat rewrites a claim in the removed directory)
            with contextlib.suppress(FileNotFoundError), interrupts_deferred():
                temp_files.remove_tree(directory)
    summary.seconds = time.perf_counter() - started
    return summary


def _run_plan(runner: TaskRunner, tasks, plan: dict, engine: Engine | None, progress,
              started: float, finals: dict[str, str], claims: Claims | None = None,
              batch: int | None = None) -> tuple[PreprocessSummary, dict | None]:
    """Run the tasks of ``plan`` not yet done in ``runner.directory``: all of them (its
    driver lock held), or with ``claims`` those this driver claims, ``batch`` at a time
    (None: all it can),
    until every task has a manifest (by whichever driver); the summary and the manifests
    by task index (None: another driver published the outputs and removed the directory
    before this one saw every manifest; the summary then counts the published corpora's
    documents and tokens only)."""
    directory, keys, level = runner.directory, runner.outputs, runner.level
    manifests: dict[int, dict] = {}
    totals = [0, 0]
    reported: set[int] = set()

    def report(task, documents: int, nbytes: int) -> None:
        totals[0] += documents
        totals[1] += nbytes
        if progress is not None:
            progress(totals[0], totals[1])

    def found(task) -> bool:  # finished (here before, or by another driver)
        manifest = verified_manifest(directory, task, keys, level, runner.fingerprint,
                                     runner.parts.count)
        if manifest is not None:
            manifests[task.index] = manifest
            totals[0] += manifest["documents"]
            totals[1] += manifest["bytes"]
        return manifest is not None

    def on_part(task, part) -> None:  # a task run in this process: after each block
        reported.add(task.index)
        report(task, part.documents, part.nbytes)

    if claims is None:
        open_work_directory(directory, plan, runner.fingerprint)
        for task in tasks:
            found(task)
        remove_strays(directory, _names(directory, [tasks[i] for i in manifests], keys, level,
                                        runner.parts.count))
        _run_tasks(runner, engine, tasks, [t for t in tasks if t.index not in manifests],
                   manifests, reported, report, on_part)
    else:
        poll = min(1.0, claims.lease / 4)
        while True:
            pending = [task for task in tasks if task.index not in manifests and not found(task)]
            if not pending:
                break
            if _removed(directory):  # published by another driver meanwhile
                return _published_summary(finals, keys, started), None
            held: list = []
            for task in pending:
                if batch is not None and len(held) == batch:
                    break
                if not claims.try_claim(task.name):
                    continue  # another driver's, until its claim expires
                if _removed(directory):  # (the claim's file remade it: removed again)
                    claims.close()
                    with contextlib.suppress(OSError):
                        temp_files.remove_tree(directory)
                    return _published_summary(finals, keys, started), None
                if found(task):  # finished by the holder just before
                    claims.release(task.name)
                    continue
                remove_task_partials(directory, task)  # a stopped holder's partial files
                held.append(task)
            if not held:
                time.sleep(poll)  # every task left is held by others
                continue
            _run_tasks(runner, engine, tasks, held, manifests, reported, report, on_part,
                       claims)
    missing = [task.describe() for task in tasks if task.index not in manifests]
    if missing:
        raise DataError(f"engine finished without tasks: {', '.join(missing[:5])}")
    return _summary(tasks, manifests, keys, started, finals), manifests


def _run_tasks(runner: TaskRunner, engine: Engine | None, tasks, pending, manifests: dict,
               reported: set, report, on_part, claims: Claims | None = None) -> None:
    """Run ``pending`` on ``engine``, each manifest into ``manifests`` (its claim released
    then)."""
    with contextlib.ExitStack() as stack:
        runner.on_part = on_part
        stack.callback(setattr, runner, "on_part", None)
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
            if index not in reported:
                report(tasks[index], manifest["documents"], manifest["bytes"])
            if claims is not None:
                claims.release(tasks[index].name)


def _removed(directory: str) -> bool:
    return not os.path.exists(os.path.join(directory, "plan.json"))


def _published_summary(finals: Mapping[str, str], keys, started: float) -> PreprocessSummary:
    """The documents and tokens of the published corpora (their runs' line counts went
    with their work directory)."""
    tokens, documents = {}, 0
    for key in keys:
        corpus = IndexedDataset(finals[key])
        tokens[key] = int(np.sum(corpus.sequence_lengths, dtype=np.int64))
        documents = max(documents, len(corpus.document_indices) - 1)
    return PreprocessSummary(
        documents=documents, tokens=_token_total(tokens), tokens_per_key=tokens, bad_lines=0,
        bad_line_kinds={}, bad_line_examples=[], blank_lines=0, bytes=0,
        seconds=time.perf_counter() - started, output_prefixes=dict(finals),
        partition_prefixes={key: [] for key in keys},
    )


def _published(directory: str, finals: Mapping[str, str], merge: bool, keys) -> bool:
    """Whether a driver has published this run's outputs (its work directory removed, or
    marked, with the outputs in place)."""
    if _removed(directory):
        return True
    if not os.path.exists(os.path.join(directory, _PUBLISHED)):
        return False
    wanted = ([idx_path_of(finals[key]) for key in keys] if merge
              else [f"{finals[key]}.data_args" for key in keys])
    return all(os.path.exists(path) for path in wanted)


def _take_merge(claims: Claims, directory: str, finals, merge: bool, keys) -> bool:
    """Wait until this driver holds the ``merge`` claim (True: it merges) or another has
    published the outputs (False)."""
    while True:
        if _published(directory, finals, merge, keys):
            return False
        if claims.try_claim("merge"):
            if _published(directory, finals, merge, keys):
                claims.release("merge")
                return False
            return True
        time.sleep(min(1.0, claims.lease / 4))


def _mark_published(directory: str, fingerprint: str) -> None:
    write_atomically(os.path.join(directory, _PUBLISHED),
                     lambda stream: stream.write(fingerprint.encode()))


def _merge(staging, shards: list[str], kept: list[str], final: str, merge_progress,
           movable: bool) -> None:
    """Merge ``shards`` into ``final`` (through the ``kept`` partitions, in as many equal
    runs of shards, when any); one shard is moved when ``movable`` (its directory goes)."""
    if kept:
        runs = len(shards) // len(kept)
        for k, name in enumerate(kept):
            merge_datasets(shards[k * runs : (k + 1) * runs], staging.staged(name))
        shards = [staging.staged(name) for name in kept]
    if len(shards) == 1 and movable:
        os.replace(bin_path_of(shards[0]), bin_path_of(staging.staged(final)))
        os.replace(idx_path_of(shards[0]), idx_path_of(staging.staged(final)))
    else:
        merge_datasets(shards, staging.staged(final), progress=merge_progress)


def _make_tokenizer(tokenizer_factory: Callable[[], Tokenizer], append_eod: bool) -> Tokenizer:
    tokenizer = tokenizer_factory()
    if not isinstance(tokenizer, Tokenizer):
        raise DataError(
            f"tokenizer_factory: {tokenizer_factory!r} returned {tokenizer!r}, which lacks "
            "encode, eod_id or vocab_size"
        )
    dtype = np.dtype(optimal_dtype(int(tokenizer.vocab_size)))
    if append_eod and not 0 <= int(tokenizer.eod_id) <= np.iinfo(dtype).max:
        raise DataError(
            f"tokenizer {tokenizer!r}: eod_id {tokenizer.eod_id} does not fit the output dtype "
            f"{dtype} chosen for vocab_size {tokenizer.vocab_size}"
        )
    return tokenizer


def _write_data_args(
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


def _names(directory: str, tasks, keys, level, parts: int) -> set[str]:
    names = set()
    for task in tasks:
        names.add(os.path.basename(manifest_path(directory, task)))
        names.update(os.path.basename(p) for p in shard_files(directory, task, keys, level, parts))
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
        tokens=_token_total(tokens),
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


def _token_total(tokens: Mapping[str, int]) -> int:
    """Tokens over the token corpora (a roles corpus counts its tokens' roles again)."""
    return sum(count for key, count in tokens.items() if not key.endswith(ROLES_SUFFIX))


def _check_conversational(tokenizer, json_keys, splitter_factory, keep_empty) -> None:
    """What a conversation encoder cannot do: more than one key, split sentences, or keep
    empty texts."""
    if len(json_keys) != 1:
        raise DataError(f"json_keys: {list(json_keys)!r}: a conversation corpus takes one key "
                        "(the one that holds each line's messages)")
    if splitter_factory is not None:
        raise DataError(f"tokenizer {tokenizer!r} encodes conversations: no sentence "
                        "splitting (--split-sentences) with a chat template")
    if keep_empty:
        raise DataError(f"tokenizer {tokenizer!r} encodes conversations: keep_empty "
                        "is for texts")
