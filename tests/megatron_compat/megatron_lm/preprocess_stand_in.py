"""(Copied to tests/unit_tests/data/test_preprocess_data.py of a temporary tree.)
Stand-in for the Megatron-LM helpers of that name that ``test_bin_reader`` imports: the
same raw files and corpus names, written without the GPT-2 tokenizer download (each
whitespace-separated number is its token id) through the drop-in's
``IndexedDatasetBuilder``."""

import json
import os

import numpy
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder


def dummy_jsonl(odir):
    numbers = [json.dumps({"text": str(i + 1)}) + "\n" for i in range(100)]
    with open(os.path.join(odir, "numbers.jsonl"), "w") as writer:
        writer.writelines(numbers)
    ascending = [
        json.dumps({"text": " ".join(str(j + 1) for j in range(i + 1))}) + "\n"
        for i in range(100)
    ]
    with open(os.path.join(odir, "numbers_ascending.jsonl"), "w") as writer:
        writer.writelines(ascending)


def build_datasets(idir, odir, extra_args=()):
    """``{name}_text_document.bin/.idx`` per raw file, one document per line (EOD appended)."""
    for name in sorted(os.listdir(idir)):
        prefix = os.path.join(odir, os.path.splitext(name)[0] + "_text_document")
        builder = IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.uint16)
        with open(os.path.join(idir, name)) as reader:
            for line in reader:
                tokens = [int(word) for word in json.loads(line)["text"].split()] + [0]
                builder.add_item(numpy.array(tokens, dtype=numpy.uint16))
                builder.end_document()
        builder.finalize(prefix + ".idx")


def gpt2_vocab(odir):
    return os.path.join(odir, "vocab.json")  # unused: no tokenizer runs


def gpt2_merge(odir):
    return os.path.join(odir, "merge.txt")
