"""Items of the ``preprocess`` suite: ours beside gigatoken's whole-file path (Megatron-LM
main's ``tools/preprocess_data_fast.py``) and Megatron's ``preprocess_data.py`` loop, on
real text.

    python tools/bench.py preprocess --only peers,rss-2g,large,modes,encoders --repeats 3

* ``peers``: a JSON-lines corpus of real text made offline from this Python's
  installation (the standard library's and site-packages' ``.py``, ``.md``, ``.rst`` and
  ``.txt`` files, one document each, sorted paths: English prose and code; 64 MB at scale
  1), tokenized with a 32k byte-level BPE ``tokenizer.json`` and a 16k SentencePiece BPE
  model (byte fallback, identity normalization), both trained here on its first texts.
  Each side runs in a fresh interpreter (tools/bench/preprocess_child.py; its docstring
  says what each side runs), its libraries imported before the clock starts and its
  tokenizer loaded on the clock. Ours proves gigatoken when a tokenizer loads and keeps
  the verdict on disk (``megadata_adapters.tokenizing.proof_cache``): "ours 1 worker, first run"
  starts from
  an empty cache each time (the proof made and stored: a tokenizer's first run), the
  other rows of ours from a cache holding that tokenizer's verdict (every later run).
  Rows: MB/s (input bytes / seconds) of ours on 1 and 2
  workers beside gigatoken, MB/s after the load,
  peak RSS above the imports, 2 workers beside Megatron's loop and beside Megatron-LM's
  own ``tools/preprocess_data.py`` (when ``MEGATRON_LM`` names a checkout at tag
  core_v0.16.1; it runs in an overlay venv where triton imports), the task plan and Ray
  beside gigatoken; a note says where the time goes (ours stage by stage on one thread,
  gigatoken's own stages). Checks: every corpus byte-identical to ours (gigatoken's
  own SentencePiece loader is compared apart, in a note).
* ``modes``: ours (1 worker, byte-level BPE) on the same corpus as .jsonl.gz, .jsonl.zst,
  .parquet and with two ``--json-keys``, beside plain .jsonl; the task plan reading it as
  an ``s3://`` object from s3rver on 127.0.0.1 beside the local file.
* ``large``: ours (1 worker, the verdict cached) beside gigatoken's whole-file path on all
  of this installation's text files up to 512 MB (no text repeated; the peers'
  tokenizers), when the machine has the memory gigatoken needs: the loads amortized.
* ``encoders``: ours (1 worker, each side a fresh interpreter, the verdict cached) with
  gigatoken (``--encoder auto``) beside the reference encoder (``--encoder reference``:
  tokenizers/tiktoken, sentencepiece, tiktoken) for each tokenizer type gigatoken takes:
  the peers' two, and Megatron's ``TikTokenizer --tiktoken-pattern v2`` whose JSON ranks
  list is the 32k byte-level BPE's merges in order (bytes 0..255, then merge k's result at
  rank 256 + k, as tiktoken's own files are laid out; 1000 special tokens). Check: the
  two corpora byte-identical.
* ``rss-2g``: peak RSS of ours (1 worker) on a 2 GB input (the corpus repeated; scale
  1), beside gigatoken's whole-file path when the machine has the memory it needs
  (estimated from its run in ``peers``), else a note saying why it was left out.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import sysconfig

from bench.harness import child_result, progress, same_files
from bench.overlays import Overlay

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "preprocess_child.py")
_SUFFIXES = (".py", ".md", ".rst", ".txt")


def real_text_jsonl(path: str, max_bytes: int) -> tuple[int, int]:
    """(documents, bytes) of a jsonl of this installation's text files, up to ``max_bytes``."""
    roots = [sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"]]
    documents = written = 0
    with open(path, "w", encoding="utf-8") as out:
        for root in dict.fromkeys(roots):
            for directory, subdirectories, files in os.walk(root):
                subdirectories[:] = sorted(
                    d for d in subdirectories
                    if d != "__pycache__" and os.path.join(directory, d) not in roots)
                for name in sorted(files):
                    if not name.endswith(_SUFFIXES):
                        continue
                    try:
                        with open(os.path.join(directory, name), encoding="utf-8") as stream:
                            text = stream.read(1 << 21)
                    except (UnicodeDecodeError, OSError):
                        continue
                    if not text.strip():
                        continue
                    line = json.dumps({"text": text}, ensure_ascii=False) + "\n"
                    size = len(line.encode("utf-8"))
                    if written + size > max_bytes:
                        return documents, written
                    out.write(line)
                    documents += 1
                    written += size
    return documents, written


def training_texts(jsonl: str, train_bytes: int) -> list[str]:
    """The first texts of ``jsonl``, up to just past ``train_bytes`` characters."""
    texts, size = [], 0
    with open(jsonl, encoding="utf-8") as stream:
        for line in stream:
            texts.append(json.loads(line)["text"])
            size += len(texts[-1])
            if size > train_bytes:
                break
    return texts


def train_tokenizers(jsonl: str, directory: str, train_bytes: int) -> dict:
    """label -> (tokenizer type, options): a byte-level BPE tokenizer.json (32k) and a
    SentencePiece BPE model (16k, byte fallback, identity normalization)."""
    import sentencepiece
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = training_texts(jsonl, train_bytes)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=32_000, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    hf = os.path.join(directory, "hf")
    os.makedirs(hf, exist_ok=True)
    tokenizer.save(os.path.join(hf, "tokenizer.json"))
    with open(os.path.join(hf, "tokenizer_config.json"), "w") as stream:
        json.dump({"eos_token": "<|endoftext|>"}, stream)
    model = os.path.join(directory, "sp")
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts[:3000]), model_prefix=model, vocab_size=16_000,
        model_type="bpe", byte_fallback=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, hard_vocab_limit=False, max_sentence_length=1 << 20,
        input_sentence_size=200_000, num_threads=2, minloglevel=2)
    return {
        "byte-level BPE 32k": ("HuggingFaceTokenizer", {"tokenizer_model": hf}),
        "SentencePiece BPE 16k": ("SentencePieceTokenizer",
                                  {"tokenizer_model": model + ".model"}),
    }


def run_side(side: str, kind: str, options: dict, source: str, prefix: str,
             workers: int, cache: str | None = None, env: dict | None = None,
             **more) -> dict:
    """One side in a fresh interpreter; ``cache``: the proof cache it sees
    (``MEGADATA_CACHE``), None for the user's own; ``env``: more of its environment;
    ``more``: more of its spec (``json_keys``, an object's ``size``)."""
    spec = {"side": side, "kind": kind, "options": options, "input": source,
            "prefix": prefix, "workers": workers, **more}
    env = {**(env or {}), **({"MEGADATA_CACHE": cache} if cache else {})}
    python = sys.executable
    if side == "megatron-lm":  # its checkout ahead of the installed megatron-core
        python, spec["checkout"] = _megatron_lm()
        env["PYTHONPATH"] = os.pathsep.join(
            [spec["checkout"], *filter(None, [os.environ.get("PYTHONPATH")])])
    return child_result([python, CHILD, json.dumps(spec)], f"preprocess {side}", env)


# Megatron-LM's own tools/preprocess_data.py: a checkout named by MEGATRON_LM (its tag
# core_v0.16.1 runs on Python 3.11; main and core_v0.19.0 need 3.12), run by an overlay
# venv in which triton imports (megatron.training's imports reach it; no GPU is used)
MEGATRON_LM_OVERLAY = Overlay(name="megatron-lm", label="triton", install=("triton",),
                              check="triton", pins="triton")


def _megatron_lm() -> tuple[str, str]:
    """(the interpreter, the checkout) for Megatron-LM's own script; ValueError(why not)."""
    checkout = os.environ.get("MEGATRON_LM", "")
    if not checkout or not all(os.path.exists(os.path.join(checkout, *parts)) for parts in (
            ("tools", "preprocess_data.py"), ("megatron", "training", "arguments.py"))):
        raise ValueError("MEGATRON_LM does not name a Megatron-LM checkout (set it to one at "
                         "tag core_v0.16.1 to run its tools/preprocess_data.py)")
    python, why = MEGATRON_LM_OVERLAY.python(create=True)
    if python is None:
        raise ValueError(why)
    return python, checkout


# side label -> (child side, workers, repeated, proof): ours' load-time proof is either
# "cached" (its verdict already on disk, as on every run after a tokenizer's first) or
# "cold" (an empty cache: the first run with a tokenizer, which proves and stores it)
SIDES = {  # ours 1 worker first: the others are compared with its corpus
    "ours 1 worker": ("ours", 1, True, "cached"),
    "ours 1 worker, first run": ("ours", 1, True, "cold"),
    "gigatoken": ("gigatoken", 1, True, None),
    "ours 2 workers": ("ours", 2, True, "cached"),
    "Megatron loop 2 workers": ("megatron", 2, False, None),
    "Megatron-LM preprocess_data.py 2 workers": ("megatron-lm", 2, False, None),
    "task plan 2 workers": ("plan", 2, False, "cached"),
    "Ray 2 CPUs": ("ray", 2, False, "cached"),
    "ours stage by stage": ("phases", 1, False, "cold"),
}


def _sides() -> tuple[dict, list[str]]:
    notes, sides = [], dict(SIDES)
    try:
        import gigatoken  # noqa: F401
    except ImportError:
        return {}, ["gigatoken is not installed (pip install 'megadata-core[tokenizers]'): "
                    "the peers items are n/a"]
    try:
        import ray  # noqa: F401
    except ImportError:
        sides.pop("Ray 2 CPUs")
        notes.append("ray is not installed: the Ray row is n/a")
    try:
        _megatron_lm()
    except ValueError as why:
        sides.pop("Megatron-LM preprocess_data.py 2 workers")
        notes.append(f"Megatron-LM's own preprocess_data.py is n/a: {why}")
    return sides, notes


def bench_peers(bench, source: str, nbytes: int, tokenizers: dict) -> dict:
    """The ``peers`` rows for each tokenizer; returns gigatoken's RSS per input MB."""
    sides, notes = _sides()
    for note in notes:
        bench.note(note)
    giga_mib_per_mb = {}
    megabytes = nbytes / 1e6
    for number, (label, (kind, options)) in enumerate(tokenizers.items()):
        results: dict[str, list[dict]] = {}
        cached = bench.path("peers", f"proofs-{number}", "cached")
        if sides:  # the cached runs' state: this tokenizer proven once, its verdict stored
            run_side("prime", kind, options, source, "", 1, cached)
        for repeat in range(bench.repeats):
            for name, (side, workers, repeated, proof) in sides.items():
                if repeat and not repeated:
                    continue
                progress(f"{label}: {name} ({repeat + 1}/{bench.repeats})")
                prefix = bench.path("peers", name.replace(" ", "-").replace(",", ""))
                cache = cached if proof == "cached" else None
                if proof == "cold":  # a new, empty cache each run
                    cache = bench.path("peers", f"proofs-{number}", f"cold-{side}-{repeat}")
                results.setdefault(name, []).append(
                    run_side(side, kind, options, source, prefix, workers, cache))
                if name != "ours 1 worker" and not repeat:
                    _compare(bench, label, name, prefix, bench.path("peers", "ours-1-worker"))
                    remove_corpus_files(prefix)
        _rows(bench, label, results, megabytes)
        giga = results.get("gigatoken")
        if giga:
            giga_mib_per_mb[label] = max(r["rss_mib"] - r["base_mib"] for r in giga) / megabytes
        remove_corpus_files(bench.path("peers", "ours-1-worker"))
    return giga_mib_per_mb


def _compare(bench, label: str, name: str, prefix: str, ours: str) -> None:
    pairs = [(prefix + ext, ours + ext) for ext in (".bin", ".idx")]
    if name == "gigatoken" and label.startswith("SentencePiece"):
        differ = differing_documents(prefix, ours)
        why = (" (it splits control pieces such as '<s>' out of the text, sentencepiece "
               "does not)" if differ else "")
        bench.note(f"{label}: gigatoken's own SentencePiece loader (Tokenizer.from_sentencepiece"
                   f", as Megatron main's --use-gigatoken runs it) differs from ours in {differ}"
                   f" documents{why}; ours are sentencepiece's ids (the Megatron loop check)")
        return
    bench.check(f"preprocess {label}: {name} corpus == ours 1 worker", same_files(*pairs))


def differing_documents(prefix: str, ours: str) -> int:
    from megadata_core import IndexedDataset

    mine, theirs = IndexedDataset(ours), IndexedDataset(prefix)
    if len(mine) != len(theirs):
        return abs(len(mine) - len(theirs))
    return sum(1 for i in range(len(mine))
               if mine[i].shape != theirs[i].shape or (mine[i] != theirs[i]).any())


def remove_corpus_files(prefix: str) -> None:
    for ext in (".bin", ".idx"):
        if os.path.exists(prefix + ext):
            os.remove(prefix + ext)


def _rows(bench, label: str, results: dict, megabytes: float) -> None:
    def rate(name, minus_load=False):
        runs = results.get(name)
        if not runs:
            return None
        return megabytes / statistics.median(
            r["seconds"] - (_load(r) if minus_load else 0.0) for r in runs)

    def rss(name):
        runs = results.get(name)
        return max(r["rss_mib"] - r["base_mib"] for r in runs) if runs else None

    def runs(name):
        return len(results.get(name, []))

    giga = rate("gigatoken")
    for name in ("ours 1 worker", "ours 1 worker, first run", "ours 2 workers",
                 "task plan 2 workers", "Ray 2 CPUs"):
        if name in results:
            bench.row(f"{label}: {name} vs gigatoken whole file, end to end", "MB/s",
                      "higher", rate(name), giga, runs(name))
    bench.row(f"{label}: ours 1 worker vs gigatoken, after the tokenizer's load", "MB/s",
              "higher", rate("ours 1 worker", True), rate("gigatoken", True),
              runs("ours 1 worker"))
    bench.row(f"{label}: peak RSS above imports, ours 1 worker vs gigatoken", "MiB", "lower",
              rss("ours 1 worker"), rss("gigatoken"), runs("ours 1 worker"))
    workers = results.get("ours 2 workers", [])
    if workers:
        bench.row(f"{label}: peak RSS of one worker process, ours 2 workers", "MiB", "lower",
                  max(r["children_mib"] for r in workers), None, len(workers))
    if "Megatron-LM preprocess_data.py 2 workers" in results:
        bench.row(f"{label}: ours 2 workers vs Megatron-LM's own preprocess_data.py, 2 workers",
                  "MB/s", "higher", rate("ours 2 workers"),
                  rate("Megatron-LM preprocess_data.py 2 workers"),
                  runs("Megatron-LM preprocess_data.py 2 workers"))
    if "Megatron loop 2 workers" in results:
        bench.row(f"{label}: ours 2 workers vs Megatron's preprocess_data.py loop, 2 workers",
                  "MB/s", "higher", rate("ours 2 workers"), rate("Megatron loop 2 workers"),
                  runs("Megatron loop 2 workers"))
    stages = []
    for name, title in (("ours stage by stage", "ours, one thread"), ("gigatoken", "gigatoken")):
        if results.get(name):
            phases = results[name][0]["phases"]
            stages.append(f"{title}: " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()))
    for name, what in (("ours 1 worker, first run", "first run, proof made"),
                       ("ours 1 worker", "proof verdict cached")):
        loads = [_load(r) for r in results.get(name, [])]
        if loads:
            stages.append(f"ours 1 worker's load ({what}) {statistics.median(loads):.2f}")
    bench.note(f"{label}, where the time goes (s): " + "; ".join(stages))


def _load(result: dict) -> float:
    phases = result["phases"]
    return phases.get("load (proof)", phases.get("load", 0.0))


def bench_rss_2g(bench, source: str, nbytes: int, tokenizers: dict, giga_mib_per_mb) -> None:
    """Peak RSS of ours on a ~2 GB input (the corpus repeated), gigatoken's where it fits."""
    target = bench.scaled(2_000_000_000)
    copies = max(1, -(-target // max(1, nbytes)))
    big = bench.path("rss2g", "input.jsonl")
    free = shutil.disk_usage(os.path.dirname(big)).free
    if free < 2.5 * copies * nbytes:
        bench.note(f"rss-2g: left out: {free / 1e9:.1f} GB free on disk, "
                   f"{2.5 * copies * nbytes / 1e9:.1f} GB needed")
        return
    with open(big, "wb") as out, open(source, "rb") as one:
        data = one.read()
        for _ in range(copies):
            out.write(data)
    del data
    size_mb = copies * nbytes / 1e6
    label, (kind, options) = next(iter(tokenizers.items()))
    prefix = bench.path("rss2g", "ours")
    progress(f"rss-2g: ours, {size_mb:,.0f} MB")
    ours = run_side("ours", kind, options, big, prefix, 1, bench.path("rss2g", "proofs"))
    remove_corpus_files(prefix)
    bench.row(f"{label}, {size_mb:,.0f} MB input: ours 1 worker, end to end", "MB/s", "higher",
              size_mb / ours["seconds"], None, 1)
    needed = giga_mib_per_mb.get(label, 0.0) * size_mb
    available = _available_mib()
    theirs = None
    if not needed:
        bench.note("rss-2g: gigatoken left out (no gigatoken run in peers to size it)")
    elif available is None or needed * 1.5 + 2048 > available:
        bench.note(f"rss-2g: gigatoken's whole-file path left out: about {needed:,.0f} MiB "
                   f"expected ({giga_mib_per_mb[label]:.1f} MiB per input MB in peers), "
                   f"{available or 0:,.0f} MiB available")
    else:
        progress(f"rss-2g: gigatoken, {size_mb:,.0f} MB")
        giga = run_side("gigatoken", kind, options, big, bench.path("rss2g", "giga"), 1)
        remove_corpus_files(bench.path("rss2g", "giga"))
        theirs = giga["rss_mib"]
    bench.row(f"{label}, {size_mb:,.0f} MB input: peak RSS, ours 1 worker vs gigatoken", "MiB",
              "lower", ours["rss_mib"], theirs, 1)
    bench.check(f"rss-2g: ours' peak RSS on {size_mb:,.0f} MB <= 1 GiB", ours["rss_mib"] <= 1024,
                f"({ours['rss_mib']:.0f} MiB)")
    os.remove(big)


def bench_large(bench, tokenizers: dict, giga_mib_per_mb: dict) -> None:
    """Ours (1 worker, the proof's verdict cached) beside gigatoken's whole-file path on
    all of this installation's text up to ~512 MB (no text repeated): the loads amortized,
    as on a real job."""
    source = bench.path("large", "input.jsonl")
    documents, nbytes = real_text_jsonl(source, bench.scaled(512_000_000, 400_000))
    megabytes = nbytes / 1e6
    bench.note(f"large: all of this installation's text files up to 512 MB: {documents:,} "
               f"documents, {megabytes:.1f} MB, none repeated; ours 1 worker with the "
               "proof's verdict cached")
    available = _available_mib()
    for number, (label, (kind, options)) in enumerate(tokenizers.items()):
        needed = giga_mib_per_mb.get(label, 11.0) * megabytes  # 9.5-11 MiB per MB seen
        if available is None or needed * 1.5 + 2048 > available:
            bench.note(f"large {label}: left out: gigatoken would need about {needed:,.0f} "
                       f"MiB, {available or 0:,.0f} MiB available")
            continue
        cache = bench.path("large", f"proofs-{number}")
        run_side("prime", kind, options, source, "", 1, cache)
        results: dict[str, list[dict]] = {"ours": [], "gigatoken": []}
        for repeat in range(bench.repeats):
            for side in ("ours", "gigatoken") if repeat % 2 == 0 else ("gigatoken", "ours"):
                progress(f"large {label}: {side} ({repeat + 1}/{bench.repeats})")
                prefix = bench.path("large", side)
                results[side].append(run_side(side, kind, options, source, prefix, 1,
                                              cache if side == "ours" else None))
                if side == "gigatoken":  # ours ran before it in the first repeat
                    if not repeat:
                        _compare(bench, f"{label} (large)", "gigatoken", prefix,
                                 bench.path("large", "ours"))
                    remove_corpus_files(prefix)
        remove_corpus_files(bench.path("large", "ours"))

        rate = {side: megabytes / statistics.median(r["seconds"] for r in runs)
                for side, runs in results.items()}
        bench.row(f"{label}, {megabytes:,.0f} MB of real text: ours 1 worker vs gigatoken whole "
                  "file, end to end", "MB/s", "higher", rate["ours"], rate["gigatoken"],
                  bench.repeats)
        bench.row(f"{label}, {megabytes:,.0f} MB of real text: peak RSS above imports, ours 1 "
                  "worker vs gigatoken", "MiB", "lower",
                  max(r["rss_mib"] - r["base_mib"] for r in results["ours"]),
                  max(r["rss_mib"] - r["base_mib"] for r in results["gigatoken"]),
                  bench.repeats)
        phases = results["gigatoken"][0]["phases"]
        bench.note(f"large {label}, gigatoken's stages (s): "
                   + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()))
    shutil.rmtree(os.path.dirname(source), ignore_errors=True)


def _input_forms(source: str, directory: str) -> dict[str, tuple[str, list[str]]]:
    """The corpus ``source`` as each input form: name -> (path, json keys)."""
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    with open(source, "rb") as stream:
        data = stream.read()
    forms = {".jsonl": (source, ["text"])}
    for suffix, compress in ((".jsonl.gz", gzip.compress),
                             (".jsonl.zst", zstandard.ZstdCompressor(level=3).compress)):
        path = os.path.join(directory, "input" + suffix)
        with open(path, "wb") as out:
            out.write(compress(data))
        forms[suffix] = (path, ["text"])
    texts = [json.loads(line)["text"] for line in data.splitlines()]
    path = os.path.join(directory, "input.parquet")
    pq.write_table(pa.table({"text": texts}), path, row_group_size=1024)
    forms[".parquet"] = (path, ["text"])
    path = os.path.join(directory, "two-keys.jsonl")
    with open(path, "w", encoding="utf-8") as out:
        for text in texts:
            out.write(json.dumps({"text": text, "copy": text}, ensure_ascii=False) + "\n")
    forms["two --json-keys (text, copy)"] = (path, ["text", "copy"])
    return forms


def bench_modes(bench, source: str, nbytes: int, tokenizers: dict) -> None:
    """Ours (1 worker, byte-level BPE, the verdict cached) on the peers' corpus in every
    input form, and the task plan reading it from s3:// (s3rver on 127.0.0.1) beside the
    local file; MB/s over the uncompressed JSON lines."""
    label, (kind, options) = next(iter(tokenizers.items()))
    directory = os.path.dirname(bench.path("modes", "x"))
    forms = _input_forms(source, directory)
    cache = bench.path("modes", "proofs")
    run_side("prime", kind, options, source, "", 1, cache)
    seconds: dict[str, list[float]] = {form: [] for form in forms}
    reference = bench.path("modes", "reference")
    for repeat in range(bench.repeats):
        for form, (path, keys) in forms.items():
            progress(f"modes: {form} ({repeat + 1}/{bench.repeats})")
            prefix = reference if form == ".jsonl" else bench.path("modes", "out")
            result = run_side("ours", kind, options, path, prefix, 1, cache, json_keys=keys)
            seconds[form].append(result["seconds"])
            if form != ".jsonl":
                if not repeat:
                    pairs = [(f"{prefix}{extra}{ext}", reference + ext)
                             for extra in ["", *[f"-{k}" for k in range(1, len(keys))]]
                             for ext in (".bin", ".idx")]
                    bench.check(f"modes: {form} corpus == .jsonl's", same_files(*pairs))
                for extra in ["", *[f"-{k}" for k in range(1, len(keys))]]:
                    remove_corpus_files(prefix + extra)
    rate = {form: len(forms[form][1]) * nbytes / 1e6 / statistics.median(values)
            for form, values in seconds.items()}
    for form in forms:
        if form != ".jsonl":
            bench.row(f"{label}: ours 1 worker, input {form} vs .jsonl", "MB/s", "higher",
                      rate[form], rate[".jsonl"], bench.repeats)
    remove_corpus_files(reference)
    _modes_s3(bench, source, nbytes, kind, options, cache)
    shutil.rmtree(directory, ignore_errors=True)


def _modes_s3(bench, source: str, nbytes: int, kind: str, options: dict, cache: str) -> None:
    """The task plan (2 workers) on ``source`` as an s3:// object (s3rver on 127.0.0.1: it
    serves ranges from files, as S3 does) beside the local file."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if root not in sys.path:
        sys.path.insert(0, root)  # loopback/ is not installed: it lives beside tools/
    from loopback import s3rver

    try:
        server = s3rver.S3rverServer({"corpora/input.jsonl": source})
    except s3rver.S3rverUnavailableError as error:
        bench.note(f"modes: s3 left out, s3rver is not available ({error})")
        return
    try:
        env = {"AWS_ENDPOINT_URL": server.endpoint, "AWS_ACCESS_KEY_ID": s3rver.ACCESS_KEY,
               "AWS_SECRET_ACCESS_KEY": s3rver.SECRET_KEY, "AWS_DEFAULT_REGION": "us-east-1"}
        megabytes = nbytes / 1e6
        for workers in (1, 2):
            local, remote, served = [], [], []
            for repeat in range(bench.repeats):
                progress(f"modes: task plan {workers} worker(s), local and s3:// "
                         f"({repeat + 1}/{bench.repeats})")
                local.append(run_side("plan", kind, options, source,
                                      bench.path("modes", "local"), workers, cache)["seconds"])
                before = server.cpu_seconds()
                remote.append(run_side("plan", kind, options, "s3://corpora/input.jsonl",
                                       bench.path("modes", "s3"), workers, cache, env=env,
                                       size=nbytes)["seconds"])
                served.append(server.cpu_seconds() - before)
                if not repeat:
                    bench.check(f"modes: s3:// corpus == local file's ({workers} worker(s))",
                                same_files(*[(bench.path("modes", "s3") + ext,
                                              bench.path("modes", "local") + ext)
                                             for ext in (".bin", ".idx")]))
            bench.row(f"task plan {workers} worker{'s' if workers > 1 else ''}: s3:// object "
                      "(s3rver on 127.0.0.1) vs local file", "MB/s", "higher",
                      megabytes / statistics.median(remote),
                      megabytes / statistics.median(local), bench.repeats)
            bench.note(f"modes: s3:// with {workers} worker(s): s3rver itself spent "
                       f"{statistics.median(served):.2f} s of CPU per run on the same cores "
                       f"(the run took {statistics.median(remote):.2f} s)")
        bench.note("modes: the task plan's workers for inputs by URL are spawned (fresh "
                   "interpreters, each importing and loading its tokenizer: TensorStore "
                   "aborts in a forked child), local inputs' workers are forked")
        bench.note(f"modes: the store's own pace, the object read in 4 MiB ranges one after "
                   f"another by boto3: {_store_pace(server.endpoint, nbytes):.0f} MB/s")
    finally:
        server.stop()
        for name in ("local", "s3"):
            remove_corpus_files(bench.path("modes", name))


def _store_pace(endpoint: str, nbytes: int) -> float:
    """MB/s of one boto3 client reading s3://corpora/input.jsonl in 4 MiB ranges."""
    import time

    import boto3

    from loopback import s3rver

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=s3rver.ACCESS_KEY,
                          aws_secret_access_key=s3rver.SECRET_KEY)
    began = time.perf_counter()
    for start in range(0, nbytes, 4 << 20):
        stop = min(start + (4 << 20), nbytes) - 1
        client.get_object(Bucket="corpora", Key="input.jsonl",
                          Range=f"bytes={start}-{stop}")["Body"].read()
    return nbytes / 1e6 / (time.perf_counter() - began)


def _available_mib() -> float | None:
    try:
        with open("/proc/meminfo") as stream:
            for line in stream:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def megatron_tiktoken_json(tokenizer_json: str, path: str) -> int:
    """Write Megatron's TikTokenizer vocabulary (a JSON list of {rank, token_bytes,
    token_str}) of a byte-level BPE ``tokenizer.json``: bytes 0..255, then merge k's
    result at rank 256 + k. Returns the number of ranks."""
    import base64

    from megadata_adapters.tokenizing.byte_level_bpe import token_bytes

    with open(tokenizer_json, encoding="utf-8") as stream:
        merges = json.load(stream)["model"]["merges"]
    pairs = [pair if isinstance(pair, list) else pair.split(" ") for pair in merges]
    tokens = [bytes([b]) for b in range(256)]
    tokens += [token_bytes(left + right) for left, right in pairs]
    with open(path, "w", encoding="utf-8") as stream:
        json.dump([{"rank": i, "token_bytes": base64.b64encode(t).decode(),
                    "token_str": t.decode("utf-8", "replace")} for i, t in enumerate(tokens)],
                  stream)
    return len(tokens)


def bench_encoders(bench, source: str, nbytes: int, tokenizers: dict) -> None:
    """Ours 1 worker with gigatoken beside the reference encoder, per tokenizer type (the
    module docstring's ``encoders``)."""
    try:
        import gigatoken  # noqa: F401
    except ImportError:
        bench.note("encoders: gigatoken is not installed: n/a")
        return
    kinds = dict(tokenizers)
    label, (kind, options) = next(iter(tokenizers.items()))
    if kind == "HuggingFaceTokenizer":
        path = bench.path("encoders", "megatron-tiktoken.json")
        ranks = megatron_tiktoken_json(
            os.path.join(options["tokenizer_model"], "tokenizer.json"), path)
        kinds[f"TikTokenizer v2, {ranks:,} ranks"] = ("TikTokenizer", {
            "tokenizer_model": path, "tiktoken_pattern": "v2", "vocab_size": 1000 + ranks,
            "tiktoken_num_special_tokens": 1000})
    for number, (label, (kind, options)) in enumerate(kinds.items()):
        cache = bench.path("encoders", f"proofs-{number}")
        run_side("prime", kind, options, source, "", 1, cache)
        seconds: dict[str, list[float]] = {"auto": [], "reference": []}
        for repeat in range(bench.repeats):
            order = ("auto", "reference") if repeat % 2 == 0 else ("reference", "auto")
            for encoder in order:
                progress(f"encoders: {label}, --encoder {encoder} ({repeat + 1}/"
                         f"{bench.repeats})")
                prefix = bench.path("encoders", encoder)
                result = run_side("ours", kind, {**options, "encoder": encoder}, source,
                                  prefix, 1, cache)
                seconds[encoder].append(result["seconds"])
            if not repeat:
                pairs = [(bench.path("encoders", "auto") + ext,
                          bench.path("encoders", "reference") + ext) for ext in (".bin", ".idx")]
                bench.check(f"encoders: {label}, gigatoken's corpus == the reference "
                            "encoder's", same_files(*pairs))
        bench.row(f"{label}: ours 1 worker, gigatoken vs the reference encoder, end to end",
                  "MB/s", "higher", nbytes / 1e6 / statistics.median(seconds["auto"]),
                  nbytes / 1e6 / statistics.median(seconds["reference"]), bench.repeats)
        for encoder in seconds:
            remove_corpus_files(bench.path("encoders", encoder))


def peer_items(bench) -> None:
    """The ``peers``, ``rss-2g``, ``large``, ``modes`` and ``encoders`` items that
    ``bench.wants``."""
    wanted = [item for item in ("peers", "rss-2g", "large", "modes", "encoders")
              if bench.wants(item)]
    if not wanted:
        return
    try:
        import sentencepiece  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError:
        bench.note("peers, rss-2g: the tokenizers and sentencepiece packages are needed: n/a")
        return
    source = bench.path("peers", "input.jsonl")
    documents, nbytes = real_text_jsonl(source, bench.scaled(64_000_000, 200_000))
    progress(f"real-text corpus: {documents:,} documents, {nbytes / 1e6:.1f} MB; training")
    tokenizers_ = train_tokenizers(source, os.path.dirname(bench.path("peers", "tok", "x")),
                                   bench.scaled(8_000_000, 100_000))
    bench.note(f"peers: real text from this Python installation (stdlib and site-packages "
               f".py/.md/.rst/.txt files), {documents:,} documents, {nbytes / 1e6:.1f} MB; "
               "each side a fresh interpreter, tokenizer load on the clock; MB/s = input "
               "bytes / seconds; Megatron's loop, the task plan, Ray and the stage timings "
               "run once")
    giga = bench_peers(bench, source, nbytes, tokenizers_) if "peers" in wanted else {}
    if "rss-2g" in wanted:
        bench_rss_2g(bench, source, nbytes, tokenizers_, giga)
    if "modes" in wanted:
        bench_modes(bench, source, nbytes, tokenizers_)
    if "encoders" in wanted:
        bench_encoders(bench, source, nbytes, tokenizers_)
    if "large" in wanted:
        try:
            import gigatoken  # noqa: F401
        except ImportError:
            bench.note("large: gigatoken is not installed: n/a")
        else:
            bench_large(bench, tokenizers_, giga)
    shutil.rmtree(os.path.dirname(source), ignore_errors=True)
    shutil.rmtree(os.path.dirname(bench.path("rss2g", "x")), ignore_errors=True)
