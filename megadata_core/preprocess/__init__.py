"""Floor 2, beside indices: JSON-lines text to ``.bin/.idx`` corpora (Megatron's
``tools/preprocess_data.py``). May import format and the ground (errors, checks,
files); never indices, cache, datasets, build, samplers or a framework.

Modules, in the order the data flows: ``reading`` (opening inputs, cutting them into
chunks of lines), ``encoding`` (the tokenizer protocol and ByteTokenizer, which the
adapters fill with real tokenizers; one JSON line to its texts; a chunk to token arrays),
``conversations`` (conversations read and normalized; with an encoder that renders them,
their tokens and each token's role, beside each other), ``plan`` (inputs cut into
deterministic tasks, Megatron's partitions on them, the plan's fingerprint; ``remote``:
inputs by URL), ``workdir`` (the staging directory of a run,
shards and manifests of a resumable run), ``tasks`` (one task to its shards; the local
engine), ``pipeline`` (the one driver, :func:`preprocess_tasks`, on any engine;
:func:`preprocess_jsonl` on this machine's processes); raw shards tokenized in the
background into a cache while readers read them: ``raw_directory`` (the cache's layout,
merged shards, the finished corpus) and ``stream`` (the producer and the waits).
"""

from megadata_core.preprocess.encoding import (
    BadLineError,
    ByteTokenizer,
    TokenizedChunk,
    Tokenizer,
    parse_record,
    tokenize_chunk,
)
from megadata_core.preprocess.pipeline import (
    PreprocessSummary,
    document_prefix,
    preprocess_jsonl,
    preprocess_tasks,
)
from megadata_core.preprocess.plan import TableReader, Task, plan_tasks
from megadata_core.preprocess.reading import count_lines, open_input, open_raw
from megadata_core.preprocess.tasks import TaskRunner, local_engine

__all__ = [
    "BadLineError",
    "ByteTokenizer",
    "PreprocessSummary",
    "TableReader",
    "Task",
    "TaskRunner",
    "TokenizedChunk",
    "Tokenizer",
    "count_lines",
    "document_prefix",
    "local_engine",
    "open_input",
    "open_raw",
    "parse_record",
    "plan_tasks",
    "preprocess_jsonl",
    "preprocess_tasks",
    "tokenize_chunk",
]
