"""Megatron-LM's ``tools/preprocess_data_fast.py`` command line, as it is written.

    megadata-preprocess-fast --input data.jsonl --output-prefix processed \\
        --json-keys text --tokenizer-type HuggingFaceTokenizer \\
        --tokenizer-model /path/to/tokenizer --use-gigatoken --append-eod

writes ``processed_text_document.bin/.idx`` with the bytes Megatron's script writes: every
document gets the EOD, and a text that tokenizes to nothing is a document of one empty
sequence (``--keep_empty``); ``--use-gigatoken`` takes gigatoken's ids, as Megatron does.
Unlike Megatron's script (all tokens of a file in memory, one key after another), the
work is ``tools/preprocess_data.py``'s: blocks of lines, bounded memory, ``--workers``,
and a bad line is an error naming the file and line where gigatoken's reader would stop
early without a word. Every flag of ``tools/preprocess_data.py`` is accepted too.
"""

from __future__ import annotations

import sys

from megadata_cli import preprocess_data, tool_main


def cli() -> None:
    """The console script: parse ``sys.argv`` and run."""
    sys.argv[:] = [*preprocess_data.megatron_argv(sys.argv), "--keep_empty"]
    tool_main.run(preprocess_data.main, doc=__doc__)


if __name__ == "__main__":
    cli()
