"""One side of the ``stream`` suite (tools/bench/stream.py), run in a fresh interpreter.

    python stream_child.py SPEC_JSON

SPEC: ``side`` (below), ``inputs`` (the JSON-lines shards), ``tokenizer`` (a
tokenizer.json, or ``"bytes"``), ``cache`` (a fresh directory for ours' cache or
megadata-preprocess's output), ``sequence_length``, ``batch``, and per side ``workers``,
``window``, ``piece_size``, ``seed``, ``out``. Prints ``RESULT {json}``: ``ready``
(``time.time()`` when the first batch was in hand; the parent subtracts the time it
started this process, so interpreter start and imports count), ``after_imports``
(seconds from the end of the side's imports to the first batch), ``first`` (sha256 of
the first sample's tokens), ``rss_mib`` (VmHWM).

Sides:

* ``ours``: ``RawShards(inputs, {"type": "huggingface", "path": tokenizer.json})`` in a
  ``GPTDataConfig`` blend with a fresh ``path_to_cache``, ``build_datasets``, then
  ``__getitems__(range(batch))``; the background tokenizer is stopped after it.
* ``preprocess``: today's path: ``megadata-preprocess --workers 2 --append_eod`` of all
  shards into one corpus, ``build_datasets`` on its prefix, the same batch. ``first``:
  the corpus's first ``sequence_length + 1`` tokens in file order (what the unshuffled
  HF side's first sample must equal).
* ``hf`` / ``hf-shuffle``: ``datasets.load_dataset("json", data_files=inputs,
  streaming=True)`` (``.shuffle(seed, buffer_size=10_000)`` for ``hf-shuffle``), ``.map``
  of a ``transformers`` fast tokenizer of the same tokenizer.json (batched, the EOD
  appended to each document), its ids concatenated and cut into ``sequence_length + 1``
  token samples until ``batch`` are made.
* ``rate``: ours with ``workers`` cores, then the whole input tokenized: tokens/s of the
  pieces made after the first batch, the process's peak RSS.
* ``shuffle``: ours on synthetic shards (``{"type": "bytes"}``, each document's text its
  id repeated, ``%07d|``), one whole epoch read in batches; writes ``out`` (npz): the
  (sample, document id) pairs served, in order, the windows' first samples and the pieces.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:1] = [os.path.dirname(HERE), os.path.dirname(os.path.dirname(HERE))]  # not bench/

import numpy as np  # noqa: E402


def _hwm_mib() -> float:
    with open("/proc/self/status") as stream:
        for line in stream:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _digest(tokens) -> str:
    return hashlib.sha256(np.ascontiguousarray(tokens, np.int64).tobytes()).hexdigest()[:16]


def _full(batch: dict) -> np.ndarray:
    """[B, sequence_length + 1] tokens of a batch (tokens and the last label)."""
    return np.concatenate([batch["tokens"], batch["labels"][:, -1:]], axis=1)


def _config(mdc, spec: dict, blend, eod: int, **more):
    return mdc.GPTDataConfig(
        random_seed=spec.get("seed", 1), sequence_length=spec["sequence_length"],
        blend=blend, split="100,0,0", path_to_cache=spec["cache"], eod_id=eod,
        create_attention_mask=False, **more)


def _raw(mdc, spec: dict, tokenizer: dict, workers=None):
    return mdc.RawShards(spec["inputs"], tokenizer, window=spec.get("window", 8),
                         piece_size=spec.get("piece_size", 4 << 20), workers=workers)


def _eod_of(path: str) -> int:
    with open(path, encoding="utf-8") as stream:
        added = json.load(stream).get("added_tokens", [])
    return next(t["id"] for t in added if t["content"] == "<|endoftext|>")


def side_ours(spec: dict, started: float) -> dict:
    import megadata_core as mdc

    began = time.perf_counter()
    raw = _raw(mdc, spec, {"type": "huggingface", "path": spec["tokenizer"]})
    config = _config(mdc, spec, ([raw], None), _eod_of(spec["tokenizer"]))
    train, _, _ = mdc.build_datasets(config, [1_000_000, None, None])
    batch = train.__getitems__(list(range(spec["batch"])))
    ready = time.time()
    after = time.perf_counter() - began
    full = _full(batch)
    made = len(train.corpus._made_tokens)
    train.corpus.stop()
    return {"ready": ready, "after_imports": after, "first": _digest(full[0]),
            "shape": list(full.shape), "pieces_made": made, "pieces": train.corpus.pieces,
            "first_window": getattr(raw, "first_window", None)}


def side_preprocess(spec: dict, started: float) -> dict:
    import megadata_core as mdc

    began = time.perf_counter()
    prefix = os.path.join(spec["cache"], "corpus")
    tool = os.path.join(os.path.dirname(sys.executable), "megadata-preprocess")
    command = [tool, "--output_prefix", prefix, "--tokenizer_type", "huggingface",
               "--tokenizer_file", spec["tokenizer"], "--append_eod", "--workers", "2",
               "--noprogress"]
    for path in spec["inputs"]:
        command += ["--input", path]
    process = subprocess.run(command, capture_output=True, text=True, check=False)
    if process.returncode:
        raise RuntimeError(f"megadata-preprocess failed: {process.stderr[-3000:]}")
    preprocessed = time.perf_counter() - began
    corpus = prefix + "_text_document"
    config = _config(mdc, spec, ([corpus], None), _eod_of(spec["tokenizer"]))
    train, _, _ = mdc.build_datasets(config, [1_000_000, None, None])
    batch = train.__getitems__(list(range(spec["batch"])))
    ready = time.time()
    after = time.perf_counter() - began
    full = _full(batch)
    data = mdc.IndexedDataset(corpus)
    first, need = [], spec["sequence_length"] + 1
    for index in range(len(data)):
        first.append(np.asarray(data[index]))
        if sum(len(x) for x in first) >= need:
            break
    return {"ready": ready, "after_imports": after, "preprocess_s": preprocessed,
            "first": _digest(np.concatenate(first)[:need]), "shape": list(full.shape)}


def side_hf(spec: dict, started: float, shuffle: bool) -> dict:
    import datasets
    from transformers import PreTrainedTokenizerFast

    datasets.disable_progress_bars()
    began = time.perf_counter()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=spec["tokenizer"])
    eod = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    stream = datasets.load_dataset("json", data_files=spec["inputs"], split="train",
                                   streaming=True)
    if shuffle:
        stream = stream.shuffle(seed=spec.get("seed", 1), buffer_size=10_000)

    first_map: list[float] = []  # (seconds, text bytes) of the first map batch

    def encode(batch):
        began_map = time.perf_counter()
        ids = tokenizer(batch["text"], add_special_tokens=False)["input_ids"]
        if not first_map:
            first_map.extend([time.perf_counter() - began_map, len(batch["text"]),
                              sum(len(text.encode("utf-8")) for text in batch["text"])])
        return {"input_ids": [row + [eod] for row in ids]}

    stream = stream.map(encode, batched=True, remove_columns=["text"])
    width, wanted = spec["sequence_length"] + 1, spec["batch"]
    pending: list[int] = []
    samples: list[np.ndarray] = []
    for example in stream:
        pending.extend(example["input_ids"])
        while len(pending) >= width and len(samples) < wanted:
            samples.append(np.asarray(pending[:width], np.int64))
            del pending[:width]
        if len(samples) == wanted:
            break
    batch = np.stack(samples)
    ready = time.time()
    return {"ready": ready, "after_imports": time.perf_counter() - began,
            "first": _digest(batch[0]), "shape": list(batch.shape), "first_map": first_map}


def side_rate(spec: dict, started: float) -> dict:
    import megadata_core as mdc

    began = time.perf_counter()
    raw = _raw(mdc, spec, {"type": "huggingface", "path": spec["tokenizer"]},
               workers=spec["workers"])
    config = _config(mdc, spec, ([raw], None), _eod_of(spec["tokenizer"]))
    train, _, _ = mdc.build_datasets(config, [1_000_000, None, None])
    train.__getitems__(list(range(spec["batch"])))
    first = time.monotonic()
    first_s = time.perf_counter() - began
    corpus = train.corpus
    while not corpus.complete():
        corpus._raise_error()
        time.sleep(0.05)
    done_s = time.perf_counter() - began
    made = list(corpus._made_tokens)  # (monotonic time, tokens) per piece this process made
    after = [(when, tokens) for when, tokens in made if when > first]
    steady = (sum(tokens for _, tokens in after) / (after[-1][0] - first)) if after else None
    total = sum(tokens for _, tokens in made)
    return {"ready": time.time(), "first_batch_s": first_s, "complete_s": done_s,
            "tokens": total, "pieces": corpus.pieces, "pieces_after_first": len(after),
            "steady_tokens_per_s": steady, "overall_tokens_per_s": total / done_s,
            "last16_tokens_per_s": corpus.tokens_per_second(), "rss_mib": _hwm_mib()}


def parse_ids(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sample row, document id) of every ``|ddddddd`` in ``tokens`` [S, W] (byte ids),
    in row then position order."""
    digits = tokens - 48
    is_digit = (digits >= 0) & (digits <= 9)
    width = tokens.shape[1]
    valid = tokens[:, : width - 7] == ord("|")
    value = np.zeros(valid.shape, np.int64)
    for j in range(1, 8):
        valid &= is_digit[:, j : width - 7 + j]
        value = value * 10 + np.clip(digits[:, j : width - 7 + j], 0, 9)
    rows, columns = np.nonzero(valid)
    return rows, value[rows, columns]


def side_shuffle(spec: dict, started: float) -> dict:
    import megadata_core as mdc

    raw = _raw(mdc, spec, {"type": "bytes"})
    config = _config(mdc, spec, ([raw], None), 256)
    train, _, _ = mdc.build_datasets(config, [None, None, None])  # one epoch
    samples, docs = [], []
    batch = spec["batch"]
    for start in range(0, len(train), batch):
        tokens = _full(train.__getitems__(list(range(start, min(start + batch, len(train))))))
        rows, ids = parse_ids(tokens)
        keep = np.ones(len(rows), bool)  # one pair per (row, document): its first
        keep[1:] = (rows[1:] != rows[:-1]) | (ids[1:] != ids[:-1])
        samples.append(rows[keep] + start)
        docs.append(ids[keep])
    corpus = train.corpus
    tasks = np.array([[corpus.shards.index(t.path), t.start, t.stop] for t in corpus.tasks],
                     np.int64)
    windows = len(train._starts) - 1
    layout = [np.asarray(train._window_pieces(w), np.int64) for w in range(windows)]
    np.savez(spec["out"], samples=np.concatenate(samples), docs=np.concatenate(docs),
             starts=np.asarray(train._starts, np.int64), tasks=tasks,
             window_pieces=np.concatenate(layout),
             window_sizes=np.array([len(x) for x in layout], np.int64))
    return {"ready": time.time(), "samples": len(train), "windows": windows,
            "pieces": corpus.pieces, "window_sizes": [len(x) for x in layout],
            "first_window": getattr(raw, "first_window", None)}


def main() -> None:
    started = time.time()
    spec = json.loads(sys.argv[1])
    side = spec["side"]
    if side in ("hf", "hf-shuffle"):
        result = side_hf(spec, started, side == "hf-shuffle")
    else:
        result = {"ours": side_ours, "preprocess": side_preprocess, "rate": side_rate,
                  "shuffle": side_shuffle}[side](spec, started)
    result.setdefault("rss_mib", _hwm_mib())
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
