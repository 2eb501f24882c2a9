"""Tokenize JSON-lines files into Megatron .bin/.idx corpora (Megatron's preprocess_data.py).

    megadata-preprocess --input 'data/*.jsonl.zst' --output_prefix out/corpus \\
        --tokenizer_type huggingface --tokenizer_file tokenizer.json --append_eod --workers 8

writes ``out/corpus_text_document.bin/.idx`` (one per ``--json_keys`` entry). Inputs may be
``.jsonl``, ``.jsonl.gz`` or ``.jsonl.zst``. A Megatron-LM command line works as it is:
dashed flags (``--output-prefix``, ``--json-keys a b``, ...) and Megatron's tokenizer types
(``--tokenizer-type GPT2BPETokenizer --vocab-file vocab.json --merge-file merges.txt``) give
Megatron's corpus. The work is done by ``megadata_core.preprocess.preprocess_tasks``; this
file parses flags, shows progress and prints a summary.
"""

from __future__ import annotations

import functools
import glob
import io
import os
import sys
import time

from absl import app, flags

from megadata_adapters.tokenizing.gigatoken_encoders import ENCODERS
from megadata_adapters.tokenizing.sentence_splitters import ENGINES, load_splitter
from megadata_adapters.tokenizing.text_tokenizers import TOKENIZER_TYPES, load_tokenizer
from megadata_cli import (
    interrupts,  # first of ours: Ctrl-C from here on is one line, not a traceback
    progress_bars,
    tool_main,
)
from megadata_core import DataError
from megadata_core.format.roles import roles_prefix
from megadata_core.preprocess import (
    PreprocessSummary,
    document_prefix,
    local_engine,
    open_input,
    open_raw,
    preprocess_tasks,
)
from megadata_core.preprocess.plan import input_identity, is_table
from megadata_core.preprocess.workdir import MANIFEST_GLOB, work_directory

OUR_TYPES = ["bytes", "huggingface", "tiktoken"]

FLAGS = flags.FLAGS
flags.DEFINE_multi_string(
    "input", None, "Input files or globs (.jsonl, .jsonl.gz, .jsonl.zst; .parquet, --json_keys "
    "naming columns); comma-separated and/or repeated. Globs expand in sorted order."
)
flags.DEFINE_string(
    "output_prefix", None,
    "Outputs are {output_prefix}_{key}_document.bin/.idx ({...}_sentence with --split_sentences)."
)
flags.DEFINE_list(
    "json_keys", ["text"],
    "Keys of each JSON record to tokenize (Megatron's '--json-keys a b' works too); one corpus "
    "per key. Megatron-LM 0.16.1 writes every key's .bin but only the last key's .idx; this "
    "tool writes both files for every key."
)
flags.DEFINE_enum(
    "tokenizer_type", "bytes", OUR_TYPES + list(TOKENIZER_TYPES),
    "Tokenizer: ours (bytes; huggingface / tiktoken with --tokenizer_file) or Megatron-LM's, "
    "with the files each takes: "
    + "; ".join(f"{name}: {needs}" for name, needs in TOKENIZER_TYPES.items())
    + ". EOD and vocabulary size are Megatron's for its types."
)
flags.DEFINE_string(
    "tokenizer_file", None, "tokenizer.json (huggingface) or BPE ranks file (tiktoken)."
)
flags.DEFINE_string("vocab_file", None, "vocab.json (GPT2BPETokenizer) or vocab.txt (BERT).")
flags.DEFINE_string("merge_file", None, "merges.txt (GPT2BPETokenizer).")
flags.DEFINE_string(
    "tokenizer_model", None, "SentencePiece .model; HuggingFace directory or tokenizer.json; "
    "TikTokenizer JSON vocabulary."
)
flags.DEFINE_integer("vocab_size", None, "NullTokenizer's vocabulary (EOD = this id); "
                     "TikTokenizer's size (default 131072).")
flags.DEFINE_enum("tiktoken_pattern", None, ["v1", "v2"], "TikTokenizer split pattern "
                  "(default v2).")
flags.DEFINE_integer("tiktoken_num_special_tokens", 1000, "TikTokenizer special tokens.")
flags.DEFINE_bool(
    "legacy_tokenizer", False, "Megatron's legacy tokenizer classes. Accepted for "
    "GPT2BPETokenizer and BERT types, whose ids this tool takes from them anyway; refused for "
    "the others, whose legacy ids differ."
)
flags.DEFINE_string(
    "eod_token", None, "End-of-document token (default: huggingface tries <|endoftext|>, </s>, "
    "<eos>, <|end_of_text|>; tiktoken uses <|endoftext|>; HuggingFaceTokenizer: eos_token, "
    "else sep_token, of tokenizer_config.json)."
)
flags.DEFINE_string(
    "chat_template", None, "Conversations: render each line's messages (--json_keys "
    "messages, OpenAI's or ShareGPT's form) with this chat template: a built-in (chatml, "
    "llama3), a .jinja file, or a tokenizer directory (its chat_template); writes each "
    "token's role beside the corpus ({prefix}_roles.bin/.idx). Needs a huggingface tokenizer."
)
flags.DEFINE_string(
    "end_of_turn", None, "With --chat_template: the assistant's end-of-turn text (default: "
    "the added token the template puts right after an assistant's content)."
)
flags.DEFINE_bool("append_eod", False, "Append the end-of-document id to every non-empty text.")
flags.DEFINE_enum(
    "encoder", "auto", list(ENCODERS),
    "auto: gigatoken (pip install 'megadata-core[tokenizers]') for byte-level BPE, SentencePiece "
    "BPE, tiktoken ranks and TikTokenizer --tiktoken-pattern v2 tokenizers where its ids are "
    "proven equal to the reference encoder's when the "
    "tokenizer loads, the reference (tiktoken, tokenizers, sentencepiece) elsewhere; "
    "reference: never gigatoken; gigatoken: as --use_gigatoken. The log says which runs."
)
flags.DEFINE_bool(
    "use_gigatoken", False,
    "Megatron-LM's --use-gigatoken: gigatoken encodes, with its own ids even where they are "
    "not proven equal to the reference's (the log says so); an error for types gigatoken "
    "cannot run."
)
flags.DEFINE_bool(
    "keep_empty", False,
    "Write what Megatron-LM's tools/preprocess_data_fast.py writes: every document gets the "
    "EOD (with --append_eod) and a text that tokenizes to nothing is a document of one empty "
    "sequence (preprocess_data.py gives it no sequence). tools/preprocess_data_fast.py sets it."
)
flags.DEFINE_bool(
    "split_sentences", False,
    "One sequence per sentence; outputs {output_prefix}_{key}_sentence.bin/.idx, in one run. "
    "Splitter (--sentence_splitter auto): NLTK punkt when its model for --lang is installed "
    "(NLTK_DATA or nltk's data path; Megatron's sentences), else sentencex (rules in its "
    "wheel, offline)."
)
flags.DEFINE_bool("keep_newlines", False,
                  "With --split_sentences: each sentence keeps the newlines after it "
                  "(without it: accepted and ignored, as Megatron does).")
flags.DEFINE_string("lang", "english", "Language of the sentence splitter (NLTK name).")
flags.DEFINE_enum("sentence_splitter", "auto", list(ENGINES), "auto, nltk (punkt) or sentencex.")
flags.DEFINE_integer(
    "workers", 1,
    "Tokenizers: threads of this process for a native encoder, processes for a Python one.",
    lower_bound=1)
flags.DEFINE_integer(
    "partitions", 1,
    "Megatron's --partitions: input line i goes to partition i mod K, so the corpus holds lines "
    "0, K, 2K, ..., then 1, K+1, ... (Megatron's order, not the input's) unless "
    "--keep_sequential_samples. A spelling of the plan: any --task_size and --engine; the "
    "plan counts the lines first (one extra read).", lower_bound=1,
)
flags.DEFINE_bool(
    "keep_sequential_samples", False,
    "With --partitions K: shard k holds lines [k*ceil(n/K), (k+1)*ceil(n/K)), so the corpus "
    "keeps the input order."
)
flags.DEFINE_bool("keep_partitions", False, "With --partitions K: keep the K partitions as "
                  "{output_prefix}_{k}_{key}_{level} after merging.")
flags.DEFINE_bool(
    "skip_bad_lines", False, "Count and skip malformed lines instead of stopping at the first."
)
flags.DEFINE_integer(
    "log_interval", 0, "Also log a progress line every this many documents (0: bar only).",
    lower_bound=0,
)
flags.DEFINE_bool(
    "progress", True, "Show a tqdm progress bar on stderr (on a terminal only; --noprogress: "
    "never)."
)
flags.DEFINE_enum(
    "engine", "local", ["local", "ray"],
    "Engine of the plan: local (--workers threads or processes; one task's blocks spread over "
    "them when there are fewer tasks) or ray (one Ray task per planned task; --ray_address; "
    "resumable, --task_size default 256)."
)
flags.DEFINE_float(
    "task_size", None,
    "Resumable: cut the inputs into tasks of about this many MB (plain .jsonl on line ends; a "
    ".gz/.zst file whole; parquet by row groups), each written as a shard with a manifest "
    "under {output_prefix}.work/, then merged in plan order: the same bytes as without it, for "
    "any engine, worker count or task size. Rerun the same command after a crash to finish "
    "the job; a work directory of another command is refused. Without it: tasks of 256 MB in "
    "a hidden staging directory, removed after a crash.",
    lower_bound=1e-6,
)
flags.DEFINE_bool("keep_shards", False, "Keep {output_prefix}.work/ after merging (resumable).")
flags.DEFINE_bool(
    "no_merge", False,
    "Do not merge (resumable); leave the shards in {output_prefix}.work/ and write "
    "{output_prefix}_{key}_{level}.data_args ('tokens prefix' pairs) for --data_args_path."
)
flags.DEFINE_string("ray_address", None, "--engine ray: cluster address (default: start a "
                    "local cluster for this run).")
flags.DEFINE_integer("ray_max_in_flight", None, "--engine ray: tasks submitted at once "
                     "(default: 2 per cluster CPU).", lower_bound=1)

# Megatron's flags that take several values ("--json-keys a b"), as our list flags.
_LIST_FLAGS = {"json_keys"}


def megatron_argv(argv: list[str]) -> list[str]:
    """``argv`` with Megatron's spellings rewritten to ours.

    ``--output-prefix x`` -> ``--output_prefix x`` (for every flag defined here, also
    ``--no-append-eod``), and ``--json-keys a b`` -> ``--json_keys=a,b``.
    """
    known = set(FLAGS)
    result = argv[:1]
    index = 1
    while index < len(argv):
        arg = argv[index]
        index += 1
        if arg == "--":
            result += argv[index - 1 :]
            break
        if not arg.startswith("--"):
            result.append(arg)
            continue
        name, equals, value = arg[2:].partition("=")
        underscored = name.replace("-", "_")
        if underscored in known:
            name = underscored
        elif underscored.startswith("no_") and underscored[3:] in known:
            name = "no" + underscored[3:]  # absl's negation of a bool flag
        if name in _LIST_FLAGS and not equals:
            values = []
            while index < len(argv) and not argv[index].startswith("--"):
                values.append(argv[index])
                index += 1
            result.append(f"--{name}={','.join(values)}")
            continue
        result.append(f"--{name}{equals}{value}")
    return result


class _ZstdRaw(io.RawIOBase):
    """Decompresses a (multi-frame) .zst file; corrupt or truncated data is an OSError."""

    def __init__(self, path: str) -> None:
        zstandard = require_zstandard(path)
        self._error = zstandard.ZstdError
        self._decompressor = zstandard.ZstdDecompressor()
        self._frame = self._decompressor.decompressobj()
        self._frame_started = False
        self._pending = memoryview(b"")
        self._file = open_raw(path)  # local or by URL; closed by close()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._pending:
            block = self._file.read(1 << 18)
            if not block:
                if self._frame_started and not self._frame.eof:
                    raise OSError("zstd: truncated file (the last frame does not end)")
                return 0
            self._pending = memoryview(self._decode(block))
        count = min(len(buffer), len(self._pending))
        buffer[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count

    def _decode(self, block: bytes) -> bytes:
        pieces = []
        while block:
            if self._frame.eof:  # the next frame starts
                self._frame = self._decompressor.decompressobj()
            try:
                pieces.append(self._frame.decompress(block))
            except self._error as error:
                raise OSError(f"zstd: {error}") from error
            self._frame_started = True
            block = self._frame.unused_data if self._frame.eof else b""
        return b"".join(pieces)

    def close(self) -> None:
        # _file is missing when __init__ failed (no zstandard, no such file): nothing to close
        if not self.closed and hasattr(self, "_file"):
            self._file.close()
        super().close()


def require_zstandard(path: str):
    """The zstandard module, or a DataError naming ``path`` and how to install it."""
    try:
        import zstandard
    except ImportError:
        raise DataError(
            f"{path}: reading .zst input needs the zstandard package; install it with "
            "pip install 'megadata-core[cli]' (or pip install zstandard)"
        ) from None
    return zstandard


def open_binary(path: str):
    """open_input plus .zst support (zstandard), for binary line reading."""
    if not path.endswith(".zst"):
        return open_input(path)
    if "://" not in path and not os.path.isfile(path):
        raise DataError(f"{path}: input file not found")
    return io.BufferedReader(_ZstdRaw(path), buffer_size=1 << 20)


def expand_inputs(values: list[str]) -> list[str]:
    """Comma-separated and repeated --input values, globs expanded (sorted), in order."""
    paths: list[str] = []
    for value in values:
        for item in filter(None, (part.strip() for part in value.split(","))):
            if glob.has_magic(item) and "://" in item:
                raise DataError(
                    f"--input: {item!r}: globs of URLs are not expanded; name the objects "
                    "(comma-separated or repeated --input)"
                )
            if glob.has_magic(item):
                matches = sorted(glob.glob(item))
                if not matches:
                    raise DataError(f"--input: {item!r} matches no file")
                paths.extend(matches)
            else:
                paths.append(item)
    if not paths:
        raise DataError("--input: no input files given")
    return paths


class _Progress:
    """tqdm bar (docs, docs/s, MB/s) plus an optional log line every N documents."""

    def __init__(self, enabled: bool, log_interval: int) -> None:
        self.enabled = enabled
        self.bar = None  # made on the first report, so an early error prints no empty bar
        self.log_interval = log_interval
        self.next_log = log_interval
        self.started = time.perf_counter()

    def __call__(self, documents: int, nbytes: int) -> None:
        if self.bar is None:
            self.bar = progress_bars.bar(
                self.enabled, unit=" docs", unit_scale=True, mininterval=0.5,
                desc="tokenizing",
            )
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        self.bar.set_postfix_str(f"{nbytes / 1e6 / elapsed:.1f} MB/s", refresh=False)
        self.bar.update(documents - self.bar.n)
        if self.log_interval and documents >= self.next_log:
            self.bar.write(
                f"processed {documents} documents ({documents / elapsed:.1f} docs/s, "
                f"{nbytes / 1e6 / elapsed:.2f} MB/s)",
                file=sys.stderr,
            )
            self.next_log = (documents // self.log_interval + 1) * self.log_interval

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def format_summary(summary: PreprocessSummary) -> str:
    """The end-of-run report, one fact a line."""
    lines = [
        f"documents:   {summary.documents}",
        f"tokens:      {summary.tokens}"
        + (f"  ({', '.join(f'{k}={v}' for k, v in summary.tokens_per_key.items())})"
           if len(summary.tokens_per_key) > 1 else ""),
        f"input:       {summary.bytes / 1e6:.2f} MB",
        f"time:        {summary.seconds:.2f} s",
        f"docs/s:      {summary.documents_per_second:.1f}",
        f"MB/s:        {summary.megabytes_per_second:.2f}",
        f"bad lines:   {summary.bad_lines}"
        + (f"  ({', '.join(f'{k}={v}' for k, v in sorted(summary.bad_line_kinds.items()))})"
           if summary.bad_lines else ""),
    ]
    lines += [f"  {example}" for example in summary.bad_line_examples]
    if summary.blank_lines:
        lines.append(f"blank lines: {summary.blank_lines} (skipped)")
    for key, prefix in summary.output_prefixes.items():
        lines.append(f"output[{key}]: {prefix}.bin / .idx")
    for key, path in summary.data_args_paths.items():
        count = len(summary.partition_prefixes.get(key, []))
        lines.append(f"data_args[{key}]: {path} ({count} shards, for --data_args_path)")
    for key, prefixes in summary.partition_prefixes.items():
        if prefixes and key not in summary.data_args_paths:
            lines.append(f"partitions[{key}]: {', '.join(prefixes)}")
    return "\n".join(lines)


def encoder_choice() -> str:
    """The --encoder value, --use_gigatoken folded in."""
    if FLAGS.use_gigatoken and FLAGS.encoder == "reference":
        raise DataError("--use_gigatoken and --encoder reference contradict each other")
    return "gigatoken" if FLAGS.use_gigatoken else FLAGS.encoder


def tokenizer_factory():
    """A picklable factory for the tokenizer the flags name (its encoder logged); DataError
    on a bad combination."""
    factory = _tokenizer_factory()
    if FLAGS.chat_template is not None:
        from megadata_adapters.tokenizing.chat_encoder import load_chat_encoder

        factory = functools.partial(load_chat_encoder, factory, FLAGS.chat_template,
                                    FLAGS.end_of_turn)
    elif FLAGS.end_of_turn is not None:
        raise DataError("--end_of_turn: only with --chat_template")
    tokenizer = factory()  # wrong or missing files fail here, before any output work
    if hasattr(tokenizer, "encoder"):
        print(f"encoder: {tokenizer.encoder}", file=sys.stderr)
    return factory


def _tokenizer_factory():
    kind = FLAGS.tokenizer_type
    encoder = encoder_choice()
    megatron_files = {
        "vocab_file": FLAGS.vocab_file,
        "merge_file": FLAGS.merge_file,
        "tokenizer_model": FLAGS.tokenizer_model,
        "vocab_size": FLAGS.vocab_size,
        "tiktoken_pattern": FLAGS.tiktoken_pattern,
    }
    if kind in TOKENIZER_TYPES:
        if FLAGS.legacy_tokenizer and not (
            kind == "GPT2BPETokenizer" or kind.startswith("BertWordPiece")
        ):
            raise DataError(
                f"--legacy-tokenizer: not supported with {kind} (Megatron's legacy classes "
                "give other ids or EOD for it); drop the flag for Megatron's default"
            )
        if FLAGS.tokenizer_file is not None:
            raise DataError(f"--tokenizer_file: {kind} takes {TOKENIZER_TYPES[kind]}")
        options = {name: value for name, value in megatron_files.items() if value is not None}
        if kind == "TikTokenizer":
            options["tiktoken_num_special_tokens"] = FLAGS.tiktoken_num_special_tokens
        if FLAGS.eod_token is not None:
            options["eod_token"] = FLAGS.eod_token
        return functools.partial(load_tokenizer, kind, encoder=encoder, **options)
    given = [f"--{name}" for name, value in megatron_files.items() if value is not None]
    if given:
        raise DataError(
            f"{', '.join(given)}: not used by --tokenizer_type {kind}; Megatron's types "
            f"({', '.join(TOKENIZER_TYPES)}) take them"
        )
    options = {}
    if FLAGS.eod_token is not None:
        if kind == "bytes":
            raise DataError("--eod_token: the bytes tokenizer's eod is fixed (id 256)")
        options["eod_token"] = FLAGS.eod_token
    if kind != "bytes" and not FLAGS.tokenizer_file:
        raise DataError(f"--tokenizer_file is required for {kind}")
    return functools.partial(load_tokenizer, kind, FLAGS.tokenizer_file, encoder=encoder,
                             **options)


def splitter_factory():
    """A picklable splitter factory for --split_sentences, or None."""
    if not FLAGS.split_sentences:
        if FLAGS.keep_newlines:  # Megatron accepts it and ignores it
            print("note: --keep_newlines has no effect without --split_sentences",
                  file=sys.stderr)
        return None
    factory = functools.partial(
        load_splitter, FLAGS.lang, FLAGS.keep_newlines, FLAGS.sentence_splitter
    )
    print(f"sentence splitter: {factory().name} (sentences take the per-line path: Python's "
          "json and the splitter per document, slower than whole blocks)", file=sys.stderr)
    return factory


def check_flags() -> None:
    """Flags that only make sense together (the core refuses the contradictions)."""
    if FLAGS.ray_address and FLAGS.engine != "ray":
        raise DataError("--ray_address: only with --engine ray")


def _file_identity(path: str | None):
    """A tokenizer file by what changes its bytes (a missing one by its name: loading it
    names the error)."""
    return input_identity(path) if path is not None and os.path.exists(path) else path


def output_command() -> dict:
    """The flags besides inputs and keys that change output bytes (the plan fingerprint),
    tokenizer files by path, size and mtime."""
    return {
        "tokenizer_type": FLAGS.tokenizer_type,
        **{name: _file_identity(FLAGS[name].value)
           for name in ("tokenizer_file", "vocab_file", "merge_file", "tokenizer_model")},
        **{name: FLAGS[name].value
           for name in ("vocab_size", "tiktoken_pattern", "tiktoken_num_special_tokens",
                        "legacy_tokenizer", "eod_token", "split_sentences", "lang",
                        "sentence_splitter")},
        # changes nothing without sentence splitting (Megatron ignores it then)
        "keep_newlines": FLAGS.keep_newlines and FLAGS.split_sentences,
        "keep_empty": FLAGS.keep_empty,
        **({"chat_template": _template_identity(FLAGS.chat_template),
            "end_of_turn": FLAGS.end_of_turn} if FLAGS.chat_template is not None else {}),
        # auto and reference give the same bytes; gigatoken's own ids may differ
        "gigatoken_ids": encoder_choice() == "gigatoken",
    }


def _template_identity(spec: str):
    """A chat template by what changes its text: a built-in by name, a file by its
    identity, a tokenizer directory by its template files'."""
    if os.path.isdir(spec):
        return [_file_identity(os.path.join(spec, name))
                for name in ("chat_template.jinja", "tokenizer_config.json",
                             "special_tokens_map.json")]
    return _file_identity(spec) if os.path.isfile(spec) else spec


def table_reader_for(inputs: list[str]):
    """A ParquetReader when an input is .parquet (its rows are the documents), else None;
    pyarrow allocating from the system's allocator (see ParquetReader: faster here)."""
    if not any(is_table(path) for path in inputs):
        return None
    from megadata_adapters.engines.parquet_records import ParquetReader

    return ParquetReader(memory_pool="system")


def run(inputs, factory, splitter, progress, merge_bar) -> PreprocessSummary:
    """The plan on the engine --engine names, resumable with a task size (``task_size_mb``)."""
    if FLAGS.engine == "ray":
        from megadata_adapters.engines.ray_preprocess import ray_engine

        engine = ray_engine(FLAGS.ray_address, max_in_flight=FLAGS.ray_max_in_flight,
                            progress=FLAGS.progress and sys.stderr.isatty())
        progress = None  # the Ray engine's own bar
    else:
        engine = local_engine(FLAGS.workers)
    size = task_size_mb()
    return preprocess_tasks(
        inputs,
        os.path.expanduser(FLAGS.output_prefix),
        factory,
        task_size=None if size is None else max(1, round(size * 1e6)),
        engine=engine,
        json_keys=json_keys(),
        append_eod=FLAGS.append_eod,
        skip_bad_lines=FLAGS.skip_bad_lines,
        open_binary=open_binary,
        table_reader=table_reader_for(inputs),
        splitter_factory=splitter,
        partitions=FLAGS.partitions,
        keep_sequential_samples=FLAGS.keep_sequential_samples,
        keep_partitions=FLAGS.keep_partitions,
        merge=not FLAGS.no_merge,
        keep_shards=FLAGS.keep_shards,
        keep_empty=FLAGS.keep_empty,
        claim_batch=None if FLAGS.engine == "ray" else FLAGS.workers,  # (one cluster start)
        command=output_command(),
        progress=progress,
        merge_progress=merge_bar.update,
    )


def task_size_mb() -> float | None:
    """--task_size; 256 where the run keeps {output_prefix}.work/ anyway (--engine ray,
    --no_merge, --keep_shards); None: the run keeps no work directory."""
    if FLAGS.task_size is None and (FLAGS.engine == "ray" or FLAGS.no_merge or FLAGS.keep_shards):
        return 256
    return FLAGS.task_size


def json_keys() -> list[str]:
    """--json_keys; ``messages`` by default with --chat_template."""
    if FLAGS.chat_template is not None and not FLAGS["json_keys"].present:
        return ["messages"]
    return list(FLAGS.json_keys)


def final_prefixes() -> list[str]:
    """The corpora a run writes under their final names (Megatron's naming)."""
    prefix = os.path.expanduser(FLAGS.output_prefix or "")
    level = "sentence" if FLAGS.split_sentences else "document"
    prefixes = [document_prefix(prefix, key, level) for key in json_keys()]
    if FLAGS.chat_template is not None:
        prefixes += [roles_prefix(p) for p in prefixes]
    return prefixes


def _identities(prefixes: list[str]) -> list:
    """What tells a run's own outputs from older files of the same names."""
    found = []
    for path in [p + ext for p in prefixes for ext in (".bin", ".idx")]:
        try:
            info = os.stat(path)
            found.append((info.st_ino, info.st_mtime_ns, info.st_size))
        except OSError:
            found.append(None)
    return found


def interrupted_line(before: list, planned: bool) -> str:
    """What an interrupted run left, in one line."""
    finals = final_prefixes()
    names = ", ".join(f"{p}.bin/.idx" for p in finals)
    after = _identities(finals)
    if None not in after and all(a != b for a, b in zip(after, before)):
        return f"interrupted after the output was complete: kept {names}"
    existed = " (the files of an earlier run are kept as they were)" if None not in before else ""
    if planned:
        directory = work_directory(os.path.expanduser(FLAGS.output_prefix))
        done = len(glob.glob(os.path.join(glob.escape(directory), MANIFEST_GLOB)))
        return (f"interrupted: nothing written to {names}{existed}; kept {done} finished "
                f"task(s) in {directory}/ (the same command resumes from them and redoes "
                "the unfinished ones)")
    return (f"interrupted: removed this run's unfinished files; nothing written to "
            f"{names}{existed}")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    planned = task_size_mb() is not None
    before = _identities(final_prefixes())  # under the before-work handler, as the flags
    try:
        interrupts.during_work()  # inside the try: a Ctrl-C from here on is reported
        _run()
    except KeyboardInterrupt:
        interrupts.report(interrupted_line(before, planned))
    finally:  # done, or stopped by an error: a Ctrl-C now changes nothing
        interrupts.after_work()


def _run() -> None:
    try:
        if not FLAGS.input:
            raise DataError("--input is required")
        if not FLAGS.output_prefix:
            raise DataError("--output_prefix is required")
        factory = tokenizer_factory()
        splitter = splitter_factory()
        inputs = expand_inputs(FLAGS.input)
        for path in inputs:
            if path.endswith(".zst"):  # before any work, not at the first .zst file
                require_zstandard(path)
                break
        progress = _Progress(FLAGS.progress, FLAGS.log_interval)
        # Shards merged (partitions or tasks, times keys); drawn once the merge starts.
        merge_bar = progress_bars.LazyBar(FLAGS.progress, desc="merging", unit=" shards")
        try:
            check_flags()
            summary = run(inputs, factory, splitter, progress, merge_bar)
        finally:
            progress.close()
            merge_bar.close()
    except DataError as error:
        sys.exit(f"error: {error}")
    print(format_summary(summary))


def cli() -> None:
    """The console script: parse ``sys.argv`` and run."""
    sys.argv[:] = megatron_argv(sys.argv)  # Megatron's dashed spellings, as ours
    tool_main.run(main)


if __name__ == "__main__":
    cli()
