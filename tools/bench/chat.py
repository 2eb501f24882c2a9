"""The ``chat`` suite of tools/bench.py: conversations preprocessed into a corpus (tokens
and per-token roles) beside transformers' ``apply_chat_template`` loop, and the padding
of best-fit packing over the conversations' lengths beside first-fit decreasing.

Usage::

    python tools/bench.py chat --repeats 3                  # full run (~3.5 min, 2 cores)
    python tools/bench.py chat --scale 0.01 --repeats 1     # smoke run (seconds)
    python tools/bench.py chat --only padding               # one item

Data: ~20 MB x scale of JSON lines ``{"messages": [...]}``, made deterministically from
the seed: an optional system prompt, 1-6 user/assistant turns, contents cut from this
installation's text files (as the ``preprocess`` suite's real text) at lognormal lengths
from a few words to ~4,000 characters, some with non-ASCII text (accents, CJK,
Cyrillic, Arabic, emoji). The tokenizer: a byte-level BPE (32k, ``tokenizers``) trained
here on the first ~5 MB x scale of that text, ``<|im_start|>``, ``<|im_end|>`` and
``<|endoftext|>`` as special tokens, saved by transformers' ``save_pretrained`` with the
built-in chatml template as its ``chat_template``.

Items:

* ``preprocess``: MB/s of the input JSON lines, end to end from the file (tokenizer
  load, reading, encoding, writing). Ours: ``preprocess_jsonl`` with the chat encoder
  (``load_chat_encoder`` of the tokenizer directory), ``append_eod``, 1 and 2 workers: the
  tokens and their roles. The peer: a transformers loop in one process, per line
  ``apply_chat_template(messages, tokenize=True, return_dict=True,
  return_assistant_tokens_mask=True)`` over the template's ``{% generation %}`` twin
  (:data:`TWIN`), the EOD appended, ids and assistant masks written with two
  ``IndexedDatasetWriter``. Checks: every corpus' tokens equal the transformers loop's,
  ours' trained positions (roles ASSISTANT and END_OF_TURN) equal its assistant masks,
  and on a sample of conversations transformers' own chatml rendering gives the same ids.
* ``padding``: the conversations' lengths (tokens with the EOD, from ours' corpus),
  S = 4096 and 8192, C = S + 1 tokens a sample (the extra token), in one shuffled order:
  ours = ``best_fit_pack`` (as the ``best_fit`` packing mode calls it), the peer =
  first-fit decreasing over the same pieces (documents longer than C cut into C-token
  pieces and a rest, as ours cuts them); the lower bound 1 - T / (ceil(T / C) C).
"""

from __future__ import annotations

import functools
import json
import os
import resource
import shutil
import time

import numpy as np

from bench.harness import measure, median_of, progress, timed
from bench.packing import lower_bound, pack_ours
from bench.preprocess_peers import real_text_jsonl
from megadata_core.format.roles import Role

INPUT_BYTES = 20_000_000
TRAIN_BYTES = 5_000_000
VOCAB = 32_000
MARKERS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
SEQUENCES = (4096, 8192)
SAMPLE = 200  # conversations checked against transformers' own chatml rendering
#: chatml with {% generation %} around each assistant content and its end of turn: what
#: transformers' return_assistant_tokens_mask needs to mark the trained tokens.
TWIN = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{message['content'] + "
    "'<|im_end|>'}}{% endgeneration %}{{'\n'}}{% else %}{{message['content'] + "
    "'<|im_end|>' + '\n'}}{% endif %}{% endfor %}"
)
UNICODE = (
    "Café crème, naïve façade, jalapeño.", "Größenordnung und Übermaß.",
    "日本語のテキストも扱えますか？", "这是一个中文句子，包含标点。", "Привет, как дела?",
    "مرحبا بالعالم", "Emoji: 🙂🚀✨ and a flag 🇫🇷.", "Ελληνικά: αβγ δεζ.", "한국어 문장입니다.",
)
SYSTEM = (
    "You are a helpful assistant.",
    "You are a careful programming assistant. Answer with working code and explain it.",
    "Answer briefly.",
    "You are an expert reviewer. Point out bugs, name the line, and suggest a fix; keep a "
    "friendly tone and do not repeat the question.",
)
QUESTIONS = (
    "Can you explain what this does?", "Why does this fail?", "Summarize this:",
    "How would you improve the following?", "What is wrong here?", "Translate this:",
    "Thanks! One more question.", "Rewrite it more clearly.",
)
TRAINED_ROLES = (int(Role.ASSISTANT), int(Role.END_OF_TURN))


# -- data ---------------------------------------------------------------------------


def text_pool(path: str, max_bytes: int) -> str:
    """This installation's text files joined (the ``preprocess`` suite's real text), the
    chat markers taken out so that no content spells a special token."""
    real_text_jsonl(path, max_bytes)
    with open(path, encoding="utf-8") as stream:
        text = "\n".join(json.loads(line)["text"] for line in stream)
    os.remove(path)
    return text.replace("<|", "< |")


def _content(rng: np.random.Generator, pool: str, mean: float) -> str:
    """A piece of the pool: a lognormal length (>= ~20 characters, <= ~4,000), starting
    and ending at whitespace, sometimes with non-ASCII text around it."""
    length = int(min(4000, max(20, rng.lognormal(np.log(mean), 1.0))))
    start = int(rng.integers(0, len(pool) - length - 1))
    space = pool.find(" ", start, start + 200)
    start = start if space < 0 else space + 1
    text = pool[start : start + length].strip() or "ok"
    if rng.random() < 0.15:
        phrase = UNICODE[int(rng.integers(len(UNICODE)))]
        text = f"{phrase} {text}" if rng.random() < 0.5 else f"{text}\n{phrase}"
    return text


def conversations_jsonl(path: str, pool: str, max_bytes: int, seed: int) -> tuple[int, int]:
    """(conversations, bytes) of a deterministic chat jsonl of ~``max_bytes``."""
    rng = np.random.default_rng(seed)
    count = written = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < max_bytes:
            messages = []
            if rng.random() < 0.6:
                messages.append({"role": "system",
                                 "content": SYSTEM[int(rng.integers(len(SYSTEM)))]})
            for _ in range(min(6, int(rng.geometric(0.45)))):
                user = _content(rng, pool, 120)
                if rng.random() < 0.5:
                    user = f"{QUESTIONS[int(rng.integers(len(QUESTIONS)))]}\n\n{user}"
                messages.append({"role": "user", "content": user})
                messages.append({"role": "assistant", "content": _content(rng, pool, 600)})
            line = json.dumps({"messages": messages}, ensure_ascii=False) + "\n"
            out.write(line)
            written += len(line.encode("utf-8"))
            count += 1
    return count, written


def train_chat_tokenizer(pool: str, directory: str, train_bytes: int) -> str:
    """A byte-level BPE 32k with the chatml markers as special tokens, saved by
    transformers' ``save_pretrained`` with the built-in chatml template; its directory."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    from megadata_adapters.tokenizing.chat_templates import ChatTemplate

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=MARKERS,
                                  show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    text = pool[:train_bytes]
    tokenizer.train_from_iterator(
        [text[i : i + 10_000] for i in range(0, len(text), 10_000)]
        + ["user assistant system"] * 20 + list(UNICODE) * 5, trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, chat_template=ChatTemplate.builtin("chatml").source,
        eos_token="<|endoftext|>")
    fast.save_pretrained(directory)
    return directory


# -- the sides ----------------------------------------------------------------------


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and its reaped children so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measured(function) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one call."""
    cpu, start = _cpu_seconds(), time.perf_counter()
    function()
    return time.perf_counter() - start, _cpu_seconds() - cpu


def run_ours(source: str, prefix: str, tokenizer_dir: str, workers: int) -> float:
    """Seconds of ``preprocess_jsonl`` with the chat encoder (tokens + roles)."""
    from megadata_adapters.tokenizing.chat_encoder import load_chat_encoder
    from megadata_adapters.tokenizing.text_tokenizers import load_tokenizer
    from megadata_core.preprocess import preprocess_jsonl

    start = time.perf_counter()
    factory = functools.partial(load_chat_encoder, functools.partial(
        load_tokenizer, "huggingface", os.path.join(tokenizer_dir, "tokenizer.json")),
        tokenizer_dir)
    preprocess_jsonl([source], prefix, factory, json_keys=["messages"], append_eod=True,
                     workers=workers)
    return time.perf_counter() - start


def run_transformers(source: str, prefix: str, tokenizer_dir: str) -> float:
    """Seconds of the transformers loop: per line ``apply_chat_template`` over the
    generation twin, ids (+ EOD) and assistant masks written as two corpora."""
    import transformers

    import megadata_core as mdc
    from megadata_core.format import optimal_dtype

    start = time.perf_counter()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    tokenizer.chat_template = TWIN
    eod = tokenizer.eos_token_id
    dtype = optimal_dtype(len(tokenizer))
    with mdc.IndexedDatasetWriter(prefix + "_messages_document", dtype=dtype) as ids, \
            mdc.IndexedDatasetWriter(prefix + "_messages_document_mask", dtype=np.uint8) as masks, \
            open(source, encoding="utf-8") as stream:
        for line in stream:
            out = tokenizer.apply_chat_template(
                json.loads(line)["messages"], tokenize=True, return_dict=True,
                return_assistant_tokens_mask=True)
            ids.add_item(np.array(out["input_ids"] + [eod], dtype=dtype))
            ids.end_document()
            masks.add_item(np.array(out["assistant_masks"] + [0], dtype=np.uint8))
            masks.end_document()
        ids.finalize()
        masks.finalize()
    return time.perf_counter() - start


def warm_transformers(source: str, tokenizer_dir: str) -> None:
    """transformers' lazy modules loaded before the clock (as ours' first run does):
    the tokenizer loaded and the first conversation rendered, untimed."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    tokenizer.chat_template = TWIN
    with open(source, encoding="utf-8") as stream:
        messages = json.loads(stream.readline())["messages"]
    tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True,
                                  return_assistant_tokens_mask=True)


def _all_tokens(prefix: str) -> tuple[np.ndarray, np.ndarray]:
    """(every token of the corpus in order, its sequence lengths)."""
    import megadata_core as mdc

    dataset = mdc.IndexedDataset(prefix)
    lengths = np.asarray(dataset.sequence_lengths, dtype=np.int64)
    return np.fromfile(prefix + ".bin", dtype=dataset.dtype), lengths


def compare(bench, name: str, ours: str, peer: str) -> None:
    """Checks: ``ours``'s tokens and trained positions equal the transformers loop's."""
    tokens, lengths = _all_tokens(ours + "_messages_document")
    expected, expected_lengths = _all_tokens(peer + "_messages_document")
    same_tokens = np.array_equal(lengths, expected_lengths) and np.array_equal(
        tokens.astype(np.int64), expected.astype(np.int64))
    bench.check(f"preprocess: {name}'s tokens == the transformers loop's "
                f"({len(lengths):,} conversations, {len(tokens):,} tokens)", same_tokens)
    roles, role_lengths = _all_tokens(ours + "_messages_document_roles")
    mask, _ = _all_tokens(peer + "_messages_document_mask")
    same_mask = np.array_equal(role_lengths, lengths) and np.array_equal(
        np.isin(roles, TRAINED_ROLES), mask.astype(bool))
    bench.check(f"preprocess: {name}'s trained positions (ASSISTANT, END_OF_TURN) == "
                f"transformers' assistant masks ({int(mask.sum()):,} trained tokens)",
                same_mask)


def check_sample(bench, source: str, ours: str, tokenizer_dir: str, seed: int) -> None:
    """Check: on a sample of conversations, transformers' own chatml rendering (the
    template as saved, not the twin) gives ours' ids, and the twin the same ids."""
    import transformers

    import megadata_core as mdc

    plain = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    twin = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    twin.chat_template = TWIN
    with open(source, encoding="utf-8") as stream:
        rows = [json.loads(line)["messages"] for line in stream]
    tokens = mdc.IndexedDataset(ours + "_messages_document")
    picked = np.random.default_rng(seed).choice(len(rows), min(SAMPLE, len(rows)),
                                                replace=False)
    bad = []
    for i in picked.tolist():  # a sample: transformers renders one at a time
        expected = list(plain.apply_chat_template(rows[i], tokenize=True, return_dict=False))
        again = twin.apply_chat_template(rows[i], tokenize=True, return_dict=True)["input_ids"]
        if tokens[i][:-1].tolist() != expected or again != expected \
                or tokens[i][-1] != plain.eos_token_id:
            bad.append(i)
    bench.check(f"preprocess: {len(picked)} sampled conversations: ours' ids == "
                "transformers' chatml apply_chat_template (and its twin's)", not bad,
                f"(differ: {bad[:5]})" if bad else "")


def where_the_time_goes(bench, source: str, tokenizer_dir: str, ours: float,
                        peer: float) -> None:
    """A note: the parts both sides share, each alone over the whole input (JSON, the
    chatml render, tokenizers' Rust encoder in one encode_batch and one text a call)."""
    from tokenizers import Tokenizer

    from megadata_adapters.tokenizing.chat_templates import ChatTemplate

    def read() -> list:
        with open(source, encoding="utf-8") as stream:
            return [json.loads(line)["messages"] for line in stream]

    template = ChatTemplate.builtin("chatml")
    rust = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))
    rust.post_processor = None
    parse, rows = measure(read)
    render, texts = measure(lambda: [template.render(messages) for messages in rows])
    batch = timed(lambda: rust.encode_batch(texts, add_special_tokens=False))
    single, encoded = measure(
        lambda: [rust.encode(text, add_special_tokens=False).ids for text in texts])
    bench.note(
        f"preprocess, where the time goes (s, each part alone over the whole input, once): "
        f"json.loads {parse:.2f}, chatml render (Jinja) {render:.2f}, tokenizers' Rust "
        f"encoder: one encode_batch {batch:.2f} (its thread pool), one text a call "
        f"{single:.2f} (one thread); of ours 1 worker's {ours:.2f} and the transformers "
        f"loop's {peer:.2f} (medians)"
    )
    fast_encoder(bench, tokenizer_dir, texts, encoded, single)


def fast_encoder(bench, tokenizer_dir: str, texts: list[str], expected: list,
                 seconds: float) -> None:
    """A note: the text path's tiktoken encoder (adapters/tokenizing/byte_level_bpe.py)
    over the same rendered conversations beside tokenizers' (one text a call), same ids
    checked; what the chat path could gain from it."""
    try:
        from megadata_adapters.tokenizing.byte_level_bpe import tokenizer_json_encoder

        with open(os.path.join(tokenizer_dir, "tokenizer.json"), encoding="utf-8") as stream:
            encoder, why = tokenizer_json_encoder(json.load(stream))
    except ImportError as error:
        encoder, why = None, f"{error.name} is not installed"
    if encoder is None:
        bench.note(f"preprocess: the tiktoken encoder is n/a here: {why}")
        return
    fast, ids = measure(lambda: [encoder.encode(text).tolist() for text in texts])
    bench.check("preprocess: the tiktoken encoder's ids == tokenizers' on the rendered "
                "conversations", ids == expected)
    bench.note(
        f"preprocess: the text path's tiktoken encoder (byte_level_bpe.RankEncoder, one "
        f"text a call) over the same rendered conversations: {fast:.2f} s, "
        f"{seconds / fast:.1f}x faster than tokenizers' {seconds:.2f} s; the chat "
        f"encoder's ids and offsets: {chat_encoder_path(tokenizer_dir)}"
    )


def chat_encoder_path(tokenizer_dir: str) -> str:
    """What the chat encoder of ``tokenizer_dir`` encodes with (its ``encoder``: the
    fast path over the text path's proven encoder, or tokenizers' offsets and why)."""
    from megadata_adapters.tokenizing.chat_encoder import load_chat_encoder
    from megadata_adapters.tokenizing.text_tokenizers import load_tokenizer

    return load_chat_encoder(functools.partial(
        load_tokenizer, "huggingface", os.path.join(tokenizer_dir, "tokenizer.json")),
        tokenizer_dir).encoder


# -- items ---------------------------------------------------------------------------


SIDES = (("ours 1 worker", 1), ("ours 2 workers", 2), ("transformers loop", 0))


def item_preprocess(bench, source: str, nbytes: int, tokenizer_dir: str, kept: str) -> None:
    """MB/s of ours (1, 2 workers) and the transformers loop; ``kept``: where ours 1
    worker's corpus stays for the padding item."""
    seconds: dict[str, list[float]] = {name: [] for name, _ in SIDES}
    cpu: dict[str, list[float]] = {name: [] for name, _ in SIDES}
    peer = bench.path("preprocess", "transformers")
    progress("preprocess: a first run of ours, 1 worker, and of transformers (untimed: "
             "imports, proofs)")
    run_ours(source, kept, tokenizer_dir, 1)
    warm_transformers(source, tokenizer_dir)
    for repeat in range(bench.repeats):
        shift = repeat % len(SIDES)
        for name, workers in SIDES[shift:] + SIDES[:shift]:
            progress(f"preprocess: {name} ({repeat + 1}/{bench.repeats})")
            prefix = bench.path("preprocess", name.replace(" ", "-"))
            if workers:
                wall, used = measured(functools.partial(run_ours, source, prefix,
                                                        tokenizer_dir, workers))
            else:
                wall, used = measured(functools.partial(run_transformers, source, peer,
                                                        tokenizer_dir))
            seconds[name].append(wall)
            cpu[name].append(used)
        if repeat == 0:
            for name, _ in SIDES[:2]:
                compare(bench, name, bench.path("preprocess", name.replace(" ", "-")), peer)
        shutil.rmtree(os.path.dirname(peer), ignore_errors=True)
    check_sample(bench, source, kept, tokenizer_dir, bench.seed)
    progress("preprocess: where the time goes")
    where_the_time_goes(bench, source, tokenizer_dir, median_of(seconds["ours 1 worker"]),
                        median_of(seconds["transformers loop"]))
    megabytes = nbytes / 1e6
    rates = {name: megabytes / median_of(values) for name, values in seconds.items()}
    for name, _ in SIDES[:2]:
        bench.row(f"chat preprocess {megabytes:.3g} MB: {name} (peer = transformers "
                  "apply_chat_template loop)", "MB/s", "higher", rates[name],
                  rates["transformers loop"], bench.repeats)
    bench.row(f"chat preprocess {megabytes:.3g} MB: ours 2 workers (peer = ours 1 worker)",
              "MB/s", "higher", rates["ours 2 workers"], rates["ours 1 worker"], bench.repeats)
    for name, _ in SIDES[:2]:
        bench.row(f"chat preprocess {megabytes:.3g} MB: {name}, CPU time (peer = "
                  "transformers loop)", "s", "lower", median_of(cpu[name]),
                  median_of(cpu["transformers loop"]), bench.repeats)
    bench.note(
        f"preprocess: goal ours >= 3x the transformers loop (here 1 worker "
        f"{rates['ours 1 worker'] / rates['transformers loop']:.2f}x, 2 workers "
        f"{rates['ours 2 workers'] / rates['transformers loop']:.2f}x); MB/s of the input "
        "JSON lines, end to end in this process (tokenizer load included); the "
        "transformers loop is one process and one thread (one conversation a call), ours "
        "encodes a block of conversations in one batch call (the fast path's pieces on the "
        "calling thread; tokenizers' encode_batch, without it, on its own thread pool, both "
        "cores, even with 1 worker): the CPU time rows are user + system of the process "
        "and its workers; the tokens and masks of each side are written as corpora; the "
        "timed runs in a rotating order."
    )


def cut_pieces(lengths: np.ndarray, order: np.ndarray, capacity: int) -> np.ndarray:
    """int64 pieces of the documents in ``order``: each cut into ``capacity``-token
    pieces and a rest (a rest of 0 is none), as best_fit_pack cuts them."""
    ordered = lengths[order]
    rest = ordered % capacity
    counts = ordered // capacity + (rest > 0)
    pieces = np.full(int(counts.sum()), capacity, dtype=np.int64)
    pieces[(np.cumsum(counts) - 1)[rest > 0]] = rest[rest > 0]
    return pieces


def first_fit_decreasing(lengths: np.ndarray, order: np.ndarray, capacity: int) -> int:
    """Bins of first-fit decreasing over the documents in ``order``, each longer than
    ``capacity`` cut into ``capacity``-token pieces and a rest (a peer's plain loop)."""
    pieces = cut_pieces(lengths, order, capacity)
    full = int((pieces == capacity).sum())
    rest = -np.sort(-pieces[pieces < capacity], kind="stable")
    free = np.full(len(rest) + 1, capacity, dtype=np.int64)
    opened = 0
    for size in rest.tolist():
        at = int(np.argmax(free[: opened + 1] >= size))  # bin `opened` is a fresh one
        free[at] -= size
        opened = max(opened, at + 1)
    return full + opened


def item_padding(bench, lengths: np.ndarray) -> None:
    order = np.random.default_rng(bench.seed + 1).permutation(len(lengths))
    tokens = int(lengths.sum())
    for sequence in SEQUENCES:
        capacity = sequence + 1
        progress(f"padding: S = {sequence}, {len(lengths):,} conversations")
        ours = pack_ours(lengths, order, capacity)
        start = time.perf_counter()
        ffd = first_fit_decreasing(lengths, order, capacity)
        ffd_seconds = time.perf_counter() - start
        ffd_padding = 1 - tokens / (ffd * capacity)
        bound = lower_bound(lengths, capacity)
        label = f"padding, {len(lengths):,} conversations, S = {sequence}"
        bench.row(f"{label} (peer = first-fit decreasing)", "%", "lower",
                  100 * ours["padding"], 100 * ffd_padding, 1)
        bench.row(f"{label} (peer = the lower bound)", "%", "lower",
                  100 * ours["padding"], 100 * bound, 1)
        bench.row(f"pack time, {len(lengths):,} conversations, S = {sequence} (peer = "
                  "first-fit decreasing, a Python loop)", "s", "lower", ours["seconds"],
                  ffd_seconds, 1)
        bench.check(f"padding, S = {sequence}: ours <= first-fit decreasing's",
                    ours["samples"] <= ffd,
                    f"({ours['samples']:,} vs {ffd:,} samples)")
        bench.check(f"padding, S = {sequence}: every token once in ours",
                    ours["every_token_once"])
        bench.note(
            f"padding, S = {sequence}: samples ours {ours['samples']:,}, first-fit "
            f"decreasing {ffd:,}, fewest possible {-(-tokens // capacity):,}; "
            f"{int((lengths > capacity).sum()):,} conversations longer than C = {capacity} "
            "cut into C-token pieces and a rest on both sides"
        )


# -- the suite ----------------------------------------------------------------------


def _short_of(workdir: str, nbytes: int) -> str | None:
    """Why the suite cannot run here (disk, memory), or None."""
    need = 8 * nbytes  # the input, 3 sides' tokens + roles / masks, the text pool
    free = shutil.disk_usage(workdir).free
    if free < need:
        return f"{free / 2**30:.1f} GiB free disk, needs ~{need / 2**30:.1f} GiB"
    try:
        import psutil
    except ImportError:
        return None
    available = psutil.virtual_memory().available
    need = 2 * 2**30 + 20 * nbytes  # two pool workers with a tokenizer each, the rows
    if available < need:
        return f"{available / 2**30:.1f} GiB memory available, needs ~{need / 2**30:.1f} GiB"
    return None


def suite_chat(bench) -> None:
    """Chat preprocessing (MB/s) beside transformers; packing padding beside FFD."""
    bench.peer = "peer"
    try:
        import jinja2  # noqa: F401
        import tokenizers  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as error:
        bench.note(f"chat: {error.name} is not installed: n/a")
        return
    target = bench.scaled(INPUT_BYTES, 200_000)
    short = _short_of(bench.workdir, target)
    if short:
        bench.note(f"chat skipped: {short}")
        return
    work = os.path.dirname(bench.path("chat", "x"))
    progress("chat: text pool, conversations, tokenizer")
    pool = text_pool(os.path.join(work, "pool.jsonl"), bench.scaled(8_000_000, 300_000))
    source = os.path.join(work, "chat.jsonl")
    count, nbytes = conversations_jsonl(source, pool, target, bench.seed)
    tokenizer_dir = train_chat_tokenizer(pool, os.path.join(work, "tokenizer"),
                                         bench.scaled(TRAIN_BYTES, 200_000))
    del pool
    bench.note(f"chat: {nbytes / 1e6:.1f} MB of JSON lines, {count:,} conversations; "
               f"byte-level BPE {VOCAB // 1000}k trained on this installation's text")
    kept = bench.path("chat", "ours")
    if bench.wants("preprocess"):
        item_preprocess(bench, source, nbytes, tokenizer_dir, kept)
    elif bench.wants("padding"):
        run_ours(source, kept, tokenizer_dir, 1)
    if bench.wants("padding"):
        import megadata_core as mdc

        dataset = mdc.IndexedDataset(kept + "_messages_document")
        item_padding(bench, np.asarray(dataset.sequence_lengths, dtype=np.int64))
    shutil.rmtree(work, ignore_errors=True)
