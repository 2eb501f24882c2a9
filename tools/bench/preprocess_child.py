"""One side of the preprocessing peers comparison (tools/bench/preprocess_peers.py), run
in a fresh interpreter so that its peak RSS is its own.

    python preprocess_child.py SPEC_JSON

SPEC: ``side`` (below), ``kind`` (a tokenizer type of ``load_tokenizer``), ``options``
(its files; ``encoder`` for ours), ``input`` (a jsonl), ``prefix`` (the output corpus),
``workers``. The libraries a side needs are imported before the clock starts; the
tokenizer's load (and for ours its load-time proof) is timed. Prints ``RESULT {json}``:
seconds, documents, tokens, phases (seconds by stage), rss_mib (this process' peak),
base_mib (its RSS after the imports), children_mib (the largest peak of its child processes).

Sides:

* ``gigatoken``: Megatron-LM main's ``tools/preprocess_data_fast.py`` path as it runs
  gigatoken: ``Tokenizer(tokenizer.json directory)`` or ``Tokenizer.from_sentencepiece``,
  ``encode_files(JsonlFileSource([input], "text"), parallel=True)``, the result
  flattened with the EOD after every document, written in one batch through
  megatron-core's ``IndexedDatasetBuilder`` (Megatron main's ``add_documents``: one
  write of all tokens, the lengths appended at once).
* ``ours``: ``preprocess_jsonl`` with ``workers`` (1: this process, a few threads),
  writing what ``tools/preprocess_data_fast.py`` writes (``keep_empty``).
* ``plan``: ``preprocess_tasks`` on ``local_engine(workers)``, 16 tasks; ``ray``: the
  same on a local Ray cluster of ``workers`` CPUs (its start counted).
* ``megatron``: Megatron-LM's ``preprocess_data.py`` loop (``Pool.imap(encode, lines,
  32)``, one encode per document, ``add_document`` per document), encoding with the
  library Megatron's tokenizer calls (``tokenizers`` for a tokenizer.json, sentencepiece
  for a ``.model``).
* ``megatron-lm``: Megatron-LM's real ``tools/preprocess_data.py`` from a checkout
  (``checkout``), run by an interpreter that can import it (triton importable).
* ``prime``: only loads the tokenizer (ours' proof made and its verdict stored in the
  proof cache the bench gives, ``MEGADATA_CACHE``).
* ``phases``: ours on one thread, stage by stage: read, JSON scan, native parse+encode,
  the rest of ``tokenize_block`` (exact path, merge, EOD), write.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:1] = [os.path.dirname(HERE), os.path.dirname(os.path.dirname(HERE))]  # not bench/

import numpy as np  # noqa: E402

_ENCODE = None


def _rss_mib(who=resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


def _current_mib() -> float:
    with open("/proc/self/statm") as stream:
        return int(stream.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _megatron_builder():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
    return IndexedDatasetBuilder


def _eod(spec) -> int:
    from megadata_adapters.tokenizing.text_tokenizers import load_tokenizer

    options = {k: v for k, v in spec["options"].items() if k != "encoder"}
    return int(load_tokenizer(spec["kind"], encoder="reference", **options).eod_id)


def gigatoken_side(spec, eod, dtype, start):
    import awkward as ak
    import gigatoken

    builder_class = _megatron_builder()
    start[0] = time.perf_counter()  # the clock starts at the load, as for ours
    model = spec["options"]["tokenizer_model"]
    if model.endswith(".model"):
        tokenizer = gigatoken.Tokenizer.from_sentencepiece(model)
    else:
        tokenizer = gigatoken.Tokenizer(model)
    loaded = time.perf_counter()
    result = tokenizer.encode_files(gigatoken.JsonlFileSource([spec["input"]], "text"),
                                    parallel=True)
    encoded = time.perf_counter()
    lengths = np.asarray(ak.num(result, axis=1), np.int64)
    ids = np.asarray(ak.flatten(result))
    tokens = np.insert(ids.astype(dtype), np.cumsum(lengths), eod)
    lengths += 1
    del result, ids
    flattened = time.perf_counter()
    builder = builder_class(spec["prefix"] + ".bin", dtype=dtype)
    builder.data_file.write(tokens.tobytes(order="C"))
    builder.sequence_lengths.extend(lengths.tolist())
    builder.document_indices.extend(
        (len(builder.document_indices) + np.arange(lengths.size)).tolist())
    builder.finalize(spec["prefix"] + ".idx")
    phases = {"load": loaded - start[0], "parse+encode": encoded - loaded,
              "flatten+EOD": flattened - encoded,
              "write": time.perf_counter() - flattened}
    return int(lengths.size), int(tokens.size), phases


def _factory(spec):
    import functools

    from megadata_adapters.tokenizing.text_tokenizers import load_tokenizer

    return functools.partial(load_tokenizer, spec["kind"], **spec["options"])


def ours_side(spec, eod, dtype, start):
    """``spec["json_keys"]`` (default text; each key's corpus moved to ``prefix`` + its
    index past the first), inputs opened as ``tools/preprocess_data.py`` opens them
    (.gz, .zst, .parquet)."""
    from megadata_cli import preprocess_data  # tools/: the tool's own openers
    from megadata_core.preprocess import preprocess_jsonl

    keys = spec.get("json_keys", ["text"])
    factory = _factory(spec)
    factory()  # remembered: preprocess_jsonl's call (and forked workers) reuse it
    loaded = time.perf_counter()
    summary = preprocess_jsonl([spec["input"]], spec["prefix"], factory, json_keys=keys,
                               append_eod=True, keep_empty=True, workers=spec["workers"],
                               open_binary=preprocess_data.open_binary,
                               table_reader=preprocess_data.table_reader_for([spec["input"]]))
    for number, key in enumerate(keys):
        _move(summary.output_prefixes[key], spec["prefix"] + (f"-{number}" if number else ""))
    return summary.documents, summary.tokens, {"load (proof)": loaded - start[0]}


def plan_side(spec, eod, dtype, start):
    from megadata_core.preprocess import local_engine, preprocess_tasks

    if spec["side"] == "ray":
        import ray

        from megadata_adapters.engines.ray_preprocess import ray_engine

        ray.init(num_cpus=spec["workers"], include_dashboard=False, log_to_driver=False)
        engine = ray_engine(progress=False, num_cpus=spec["workers"])
    else:
        engine = local_engine(spec["workers"])
    size = spec.get("size") or os.path.getsize(spec["input"])  # (an object's: given)
    summary = preprocess_tasks([spec["input"]], spec["prefix"], _factory(spec),
                               append_eod=True, keep_empty=True, engine=engine,
                               task_size=max(1, size // 16))
    _move(summary.output_prefixes["text"], spec["prefix"])
    return summary.documents, summary.tokens, {}


def _move(written: str, prefix: str) -> None:
    for suffix in (".bin", ".idx"):
        os.replace(written + suffix, prefix + suffix)


def _megatron_init(model: str, eod: int) -> None:
    global _ENCODE
    if model.endswith(".model"):
        import sentencepiece

        processor = sentencepiece.SentencePieceProcessor(model_file=model)
        _ENCODE = processor.encode, eod
    else:
        from tokenizers import Tokenizer

        rust = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
        _ENCODE = (lambda text: rust.encode(text, add_special_tokens=False).ids), eod


def _megatron_encode(line: str):
    encode, eod = _ENCODE
    ids = list(encode(json.loads(line)["text"]))
    ids.append(eod)  # what preprocess_data_fast.py writes: the EOD on every document
    return ids, len(line)


def megatron_side(spec, eod, dtype, start):
    import multiprocessing

    builder = _megatron_builder()(spec["prefix"] + ".bin", dtype=dtype)
    documents = tokens = 0
    with open(spec["input"], encoding="utf-8") as lines, multiprocessing.Pool(
        spec["workers"], initializer=_megatron_init,
        initargs=(spec["options"]["tokenizer_model"], eod),
    ) as pool:
        for ids, _ in pool.imap(_megatron_encode, lines, 32):
            builder.add_document(ids, [len(ids)])
            documents += 1
            tokens += len(ids)
    builder.finalize(spec["prefix"] + ".idx")
    return documents, tokens, {}


def megatron_lm_side(spec, eod, dtype, start):
    """Megatron-LM's own ``tools/preprocess_data.py`` (``spec["checkout"]``, on the path
    ahead of the installed megatron-core), its modules imported before the clock, its
    ``main()`` timed with Megatron's command line."""
    import importlib.util

    script = os.path.join(spec["checkout"], "tools", "preprocess_data.py")
    found = importlib.util.spec_from_file_location("megatron_lm_preprocess_data", script)
    module = importlib.util.module_from_spec(found)
    sys.modules[found.name] = module  # its pool pickles its classes by module name
    found.loader.exec_module(module)
    out = spec["prefix"] + "-megatron-lm"
    sys.argv = [script, "--input", spec["input"], "--output-prefix", out, "--json-keys", "text",
                "--tokenizer-type", spec["kind"],
                "--tokenizer-model", spec["options"]["tokenizer_model"],
                "--workers", str(spec["workers"]), "--append-eod", "--log-interval", "1000000"]
    start[0] = time.perf_counter()
    module.main()
    _move(out + "_text_document", spec["prefix"])
    from megadata_core import IndexedDataset

    corpus = IndexedDataset(spec["prefix"])
    return len(corpus), int(corpus.sequence_lengths.sum()), {}


def phases_side(spec, eod, dtype, start):
    from megadata_core import IndexedDatasetWriter
    from megadata_core.preprocess.block_encoding import tokenize_block
    from megadata_core.preprocess.json_scan import scan_block
    from megadata_core.preprocess.reading import read_blocks
    from megadata_core.preprocess.workdir import write_documents

    tokenizer = _factory(spec)()
    native = tokenizer.block_encoder
    clock = {"load (proof)": time.perf_counter() - start[0]}
    clock.update(dict.fromkeys(["read", "JSON scan", "native parse+encode", "tokenize_block",
                                "write"], 0.0))
    documents = tokens = 0

    def timed(stage, function, *args, **kwargs):
        began = time.perf_counter()
        value = function(*args, **kwargs)
        clock[stage] += time.perf_counter() - began
        return value

    writer = IndexedDatasetWriter(spec["prefix"], dtype)
    with open(spec["input"], "rb") as stream:
        blocks = read_blocks(stream, 4 << 20)
        while (block := timed("read", next, blocks, None)) is not None:
            if native is not None:  # tokenize_block's first two stages, timed apart too
                timed("JSON scan", scan_block, block, ("text",), native.unproven)
                timed("native parse+encode", native.encode_jsonl, block, "text")
            result = timed("tokenize_block", tokenize_block, block, tokenizer, ("text",),
                           append_eod=True, dtype=dtype, keep_empty=True)
            timed("write", write_documents, writer, result.tokens["text"],
                  result.sequence_lengths["text"], result.document_sequences["text"])
            documents += result.documents
            tokens += int(result.tokens["text"].size)
    timed("write", writer.finalize)
    return documents, tokens, clock


def prime_side(spec, eod, dtype, start):
    """Load the tokenizer only: its proof's verdict stored in the cache the bench gave."""
    _factory(spec)()
    return 0, 0, {}


SIDES = {"prime": prime_side, "gigatoken": gigatoken_side, "ours": ours_side,
         "plan": plan_side, "ray": plan_side, "megatron": megatron_side,
         "megatron-lm": megatron_lm_side, "phases": phases_side}


def main() -> None:
    spec = json.loads(sys.argv[1])
    side = SIDES[spec["side"]]
    from megadata_adapters.tokenizing.text_tokenizers import (
        load_tokenizer,  # imports common to every side
    )
    from megadata_core.format import optimal_dtype

    options = {k: v for k, v in spec["options"].items() if k != "encoder"}
    reference = load_tokenizer(spec["kind"], encoder="reference", **options)
    eod, vocab = int(reference.eod_id), reference.vocab_size
    dtype = np.dtype(optimal_dtype(vocab)).type
    if spec["side"] in ("gigatoken", "ours", "phases", "prime"):
        import awkward  # noqa: F401 - gigatoken's results (both sides use them)
        import gigatoken  # noqa: F401

        from megadata_cli import preprocess_data  # noqa: F401 - ours opens inputs as the tool does
    if spec["input"].endswith(".parquet"):  # the libraries of the input's kind, too
        import pyarrow.compute  # noqa: F401
        import pyarrow.parquet  # noqa: F401

        import megadata_adapters.engines.parquet_records  # noqa: F401
    if "://" in spec["input"]:
        import megadata_adapters.storage.tensorstore_bins  # noqa: F401 (tensorstore)
    from megadata_adapters.tokenizing import text_tokenizers

    text_tokenizers._LOADED.clear()  # ours loads (and proves) on the clock
    del reference  # its objects gone before the clock, as in a fresh run of the tool (a
    gc.collect()  # heap they filled made the collections during our load dearer)
    base = _current_mib()
    start = [time.perf_counter()]
    documents, tokens, phases = side(spec, eod, dtype, start)
    seconds = time.perf_counter() - start[0]
    print("RESULT " + json.dumps({
        "seconds": seconds, "documents": documents, "tokens": tokens, "phases": phases,
        "rss_mib": _rss_mib(), "base_mib": base,
        "children_mib": _rss_mib(resource.RUSAGE_CHILDREN),
    }), flush=True)


if __name__ == "__main__":
    main()
