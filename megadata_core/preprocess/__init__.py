"""Floor 2, beside indices: JSON-lines text to ``.bin/.idx`` corpora (Megatron's
``tools/preprocess_data.py``). May import format and the ground (errors, checks,
files); never indices, cache, datasets, build, samplers or a framework.

Modules, in the order the data flows: ``reading`` (opening inputs, cutting them into
chunks of lines), ``records`` (one JSON line to its texts), ``encoding`` (a chunk to
token arrays), ``pool`` (chunks through worker processes, in order), ``outputs`` (the
staging directory and the corpora written into it), ``pipeline`` (the driver,
:func:`preprocess_jsonl`). Past one machine: ``plan`` (inputs cut into deterministic
tasks, the plan's fingerprint; ``remote``: inputs by URL), ``workdir`` (shards and
manifests of a resumable run), ``tasks`` (one task to its shards; the local engine),
``task_pipeline`` (the driver, :func:`preprocess_tasks`, on any engine). ``tokenizers``
holds the protocol and ByteTokenizer (the adapters fill the protocol with real tokenizers).
"""

from megadata_core.preprocess.encoding import TokenizedChunk, tokenize_chunk
from megadata_core.preprocess.pipeline import PreprocessSummary, document_prefix, preprocess_jsonl
from megadata_core.preprocess.plan import TableReader, Task, plan_tasks
from megadata_core.preprocess.reading import count_lines, open_input, open_raw
from megadata_core.preprocess.records import BadLineError, parse_record
from megadata_core.preprocess.task_pipeline import preprocess_tasks
from megadata_core.preprocess.tasks import TaskRunner, local_engine
from megadata_core.preprocess.tokenizers import ByteTokenizer, Tokenizer

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
