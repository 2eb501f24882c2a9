"""Floor 2, beside indices: JSON-lines text to ``.bin/.idx`` corpora (Megatron's
``tools/preprocess_data.py``). May import format and floor 0 (errors, checks,
temp_files); never indices, datasets, samplers or a framework.

Modules, in the order the data flows: ``reading`` (opening inputs, cutting them into
chunks of lines), ``records`` (one JSON line to its texts), ``encoding`` (a chunk to
token arrays), ``pool`` (chunks through worker processes, in order), ``outputs`` (the
staging directory and the corpora written into it), ``pipeline`` (the driver,
:func:`preprocess_jsonl`). ``tokenizers`` holds the protocol and ByteTokenizer (the
adapters fill the protocol with real tokenizers).
"""

from megadata_core.preprocess.encoding import TokenizedChunk, tokenize_chunk
from megadata_core.preprocess.pipeline import PreprocessSummary, document_prefix, preprocess_jsonl
from megadata_core.preprocess.reading import count_lines, open_input
from megadata_core.preprocess.records import BadLineError, parse_record
from megadata_core.preprocess.tokenizers import ByteTokenizer, Tokenizer

__all__ = [
    "BadLineError",
    "ByteTokenizer",
    "PreprocessSummary",
    "TokenizedChunk",
    "Tokenizer",
    "count_lines",
    "document_prefix",
    "open_input",
    "parse_record",
    "preprocess_jsonl",
    "tokenize_chunk",
]
