"""Tokenize JSON-lines files into Megatron .bin/.idx corpora (Megatron's preprocess_data.py).

    python tools/preprocess_data.py --input 'data/*.jsonl.zst' --output_prefix out/corpus \\
        --tokenizer_type huggingface --tokenizer_file tokenizer.json --append_eod --workers 8

writes ``out/corpus_text_document.bin/.idx`` (one per ``--json_keys`` entry). Inputs may be
``.jsonl``, ``.jsonl.gz`` or ``.jsonl.zst``. The work is done by
``megadata_core.preprocess.preprocess_jsonl``; this file parses flags, shows progress and
prints a summary.
"""

from __future__ import annotations

import functools
import glob
import io
import os
import sys
import time

from absl import app, flags

from adapters.text_tokenizers import load_tokenizer
from megadata_core import DataError
from megadata_core.preprocess import PreprocessSummary, open_input, preprocess_jsonl

FLAGS = flags.FLAGS
flags.DEFINE_multi_string(
    "input", None, "Input files or globs (.jsonl, .jsonl.gz, .jsonl.zst); comma-separated "
    "and/or repeated. Globs expand in sorted order."
)
flags.DEFINE_string("output_prefix", None, "Outputs are {output_prefix}_{key}_document.bin/.idx.")
flags.DEFINE_list("json_keys", ["text"], "Keys of each JSON record to tokenize.")
flags.DEFINE_enum(
    "tokenizer_type", "bytes", ["bytes", "huggingface", "tiktoken"], "Tokenizer kind."
)
flags.DEFINE_string(
    "tokenizer_file", None, "tokenizer.json (huggingface) or BPE ranks file (tiktoken)."
)
flags.DEFINE_string(
    "eod_token", None, "End-of-document token (default: huggingface tries <|endoftext|>, </s>, "
    "<eos>, <|end_of_text|>; tiktoken uses <|endoftext|>)."
)
flags.DEFINE_bool("append_eod", False, "Append the end-of-document id to every non-empty text.")
flags.DEFINE_integer("workers", 1, "Tokenizer processes.", lower_bound=1)
flags.DEFINE_integer(
    "partitions", 1, "Write K contiguous shards, then merge them into the output.", lower_bound=1
)
flags.DEFINE_bool("keep_partitions", False, "Keep the shard files after merging.")
flags.DEFINE_bool(
    "skip_bad_lines", False, "Count and skip malformed lines instead of stopping at the first."
)
flags.DEFINE_integer(
    "log_interval", 0, "Also log a progress line every this many documents (0: bar only).",
    lower_bound=0,
)
flags.DEFINE_bool("progress", True, "Show a tqdm progress bar on stderr.")


class _ZstdRaw(io.RawIOBase):
    """Decompresses a (multi-frame) .zst file; corrupt or truncated data is an OSError."""

    def __init__(self, path: str) -> None:
        zstandard = require_zstandard(path)
        self._error = zstandard.ZstdError
        self._decompressor = zstandard.ZstdDecompressor()
        self._frame = self._decompressor.decompressobj()
        self._frame_started = False
        self._pending = memoryview(b"")
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close()

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
        if not self.closed:
            self._file.close()
        super().close()


def require_zstandard(path: str):
    """The zstandard module, or a DataError naming ``path`` and how to install it."""
    try:
        import zstandard
    except ImportError:
        raise DataError(
            f"{path}: reading .zst input needs the zstandard package; install it with "
            "pip install 'megadata[cli]' (or pip install zstandard)"
        ) from None
    return zstandard


def open_binary(path: str):
    """open_input plus .zst support (zstandard), for binary line reading."""
    if not path.endswith(".zst"):
        return open_input(path)
    if not os.path.isfile(path):
        raise DataError(f"{path}: input file not found")
    return io.BufferedReader(_ZstdRaw(path), buffer_size=1 << 20)


def expand_inputs(values: list[str]) -> list[str]:
    """Comma-separated and repeated --input values, globs expanded (sorted), in order."""
    paths: list[str] = []
    for value in values:
        for item in filter(None, (part.strip() for part in value.split(","))):
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
            from tqdm import tqdm

            self.bar = tqdm(
                unit=" docs", unit_scale=True, disable=not self.enabled, file=sys.stderr,
                mininterval=0.5, dynamic_ncols=True,
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
    for key, prefixes in summary.partition_prefixes.items():
        if prefixes:
            lines.append(f"partitions[{key}]: {', '.join(prefixes)}")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        if not FLAGS.input:
            raise DataError("--input is required")
        if not FLAGS.output_prefix:
            raise DataError("--output_prefix is required")
        options = {}
        if FLAGS.eod_token is not None:
            if FLAGS.tokenizer_type == "bytes":
                raise DataError("--eod_token: the bytes tokenizer's eod is fixed (id 256)")
            options["eod_token"] = FLAGS.eod_token
        if FLAGS.tokenizer_type != "bytes" and not FLAGS.tokenizer_file:
            raise DataError(f"--tokenizer_file is required for {FLAGS.tokenizer_type}")
        factory = functools.partial(
            load_tokenizer, FLAGS.tokenizer_type, FLAGS.tokenizer_file, **options
        )
        inputs = expand_inputs(FLAGS.input)
        for path in inputs:
            if path.endswith(".zst"):  # before any work, not at the first .zst file
                require_zstandard(path)
                break
        progress = _Progress(FLAGS.progress, FLAGS.log_interval)
        try:
            summary = preprocess_jsonl(
                inputs,
                os.path.expanduser(FLAGS.output_prefix),
                factory,
                json_keys=FLAGS.json_keys,
                append_eod=FLAGS.append_eod,
                workers=FLAGS.workers,
                partitions=FLAGS.partitions,
                keep_partitions=FLAGS.keep_partitions,
                skip_bad_lines=FLAGS.skip_bad_lines,
                open_binary=open_binary,
                progress=progress,
            )
        finally:
            progress.close()
    except DataError as error:
        sys.exit(f"error: {error}")
    print(format_summary(summary))


if __name__ == "__main__":
    app.run(main)
