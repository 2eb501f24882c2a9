"""Samples as text for tools/inspect_data.py: document boundaries, loss-masked positions
and segment ids marked, as plain text or a small self-contained HTML page.

A sample is cut into *runs* of tokens that share their document, loss mask and segment
(an EOD token is a run of its own); each run is decoded on its own (a multi-byte
character cut by a run boundary shows as a replacement character).

A sample of a conversation corpus (a member with a roles sibling, docs/conversations.md)
mostly does not train: on the HTML page its trained positions (``loss_mask`` 1: the
label that follows them trains) are one strong colour, ``trained``, and the rest is
dimmed context, ``context``, instead of striking most of the text through.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from megadata_core.errors import DataError

# Backgrounds for consecutive documents of one sample (cycled).
PALETTE = ("#fde2b8", "#cfe8fc", "#d5f5d0", "#f6d1ee", "#fff4a8", "#dcd6fb", "#c9f1ee")


@dataclass(frozen=True)
class Run:
    """Tokens ``[start, stop)`` of a sample that share document, mask and segment."""

    start: int
    stop: int
    document: int  # corpus sequence id, -1 for padding
    masked: bool  # loss_mask == 0
    segment: int | None  # segment id when the sample has them
    eod: bool  # the run is one EOD token


def runs(
    tokens: np.ndarray,
    documents: np.ndarray,
    loss_mask: np.ndarray,
    segments: np.ndarray | None,
    eod_id: int | None,
) -> list[Run]:
    """The runs of one sample (all arrays [S])."""
    size = len(tokens)
    if size == 0:
        return []
    masked = np.asarray(loss_mask) == 0
    eod = np.zeros(size, dtype=bool) if eod_id is None else np.asarray(tokens) == eod_id
    change = np.zeros(size, dtype=bool)
    change[0] = True
    change[1:] |= documents[1:] != documents[:-1]
    change[1:] |= masked[1:] != masked[:-1]
    change |= eod
    change[1:] |= eod[:-1]
    if segments is not None:
        change[1:] |= segments[1:] != segments[:-1]
    starts = np.flatnonzero(change).tolist()
    stops = starts[1:] + [size]
    return [
        Run(
            start, stop, int(documents[start]), bool(masked[start]),
            None if segments is None else int(segments[start]), bool(eod[start]),
        )
        for start, stop in zip(starts, stops)
    ]


def is_conversation(member) -> bool:
    """Whether a GPT dataset (a blend's member) reads a conversation corpus: its loss
    mask trains only the labels of the trained roles."""
    return bool(getattr(member, "has_roles", False))


def decode(tokenizer, tokens: np.ndarray) -> str:
    """A run's text: the tokenizer's decoding, or the token ids without one."""
    if tokenizer is None:
        return " ".join(str(token) for token in np.asarray(tokens).tolist()) + " "
    return tokenizer.decode(np.asarray(tokens).tolist())


def _label(run: Run) -> str:
    name = "padding" if run.document < 0 else f"doc {run.document}"
    return name if run.segment is None else f"{name} · seg {run.segment}"


def as_text(tokens: np.ndarray, sample_runs: list[Run], tokenizer) -> str:
    """The sample as one string: ``⟦doc N⟧`` where a document (or segment) starts,
    ``⟨eod⟩`` for EOD tokens, ``[masked: ...]`` around loss-masked text."""
    parts = []
    previous = None
    for run in sample_runs:
        where = (run.document, run.segment)
        if where != previous:
            parts.append(f"⟦{_label(run)}⟧")
            previous = where
        text = "⟨eod⟩" if run.eod else decode(tokenizer, tokens[run.start : run.stop])
        parts.append(f"[masked: {text}]" if run.masked else text)
    return "".join(parts)


_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
.sample { margin-bottom: 2em; }
.text { font-family: monospace; white-space: pre-wrap; border: 1px solid #ccc;
        padding: 0.6em; line-height: 1.5; }
.masked { text-decoration: line-through; opacity: 0.55; }
.trained { background: #1a7f37 !important; color: #fff; }
.context { opacity: 0.45; }
.eod { background: #444; color: #fff; border-radius: 3px; padding: 0 2px; }
.mark { font-size: 75%; color: #555; background: #eee; border-radius: 3px;
        padding: 0 3px; margin-right: 2px; }
"""


def _classes(run: Run, conversation: bool) -> str:
    """A run's CSS classes: ``eod``; in a conversation sample ``trained`` (loss mask 1)
    or ``context``, elsewhere ``masked`` (loss mask 0)."""
    if conversation:
        names = ["eod"] if run.eod else []
        return " ".join([*names, "context" if run.masked else "trained"])
    return " ".join(name for name, on in (("eod", run.eod), ("masked", run.masked)) if on)


def as_html(
    title: str,
    samples: list[tuple[str, np.ndarray, list[Run]]],
    tokenizer,
    conversations: Sequence[bool] | None = None,
) -> str:
    """A self-contained page: per sample its heading and text, a colour per document,
    masked text struck through, EOD tokens dark, document/segment marks at each start.
    ``conversations[k]``: sample k comes from a conversation corpus (its trained
    positions one strong colour, the rest dimmed context; module docstring)."""
    flags = [False] * len(samples) if conversations is None else [bool(c) for c in conversations]
    if len(flags) != len(samples):
        raise DataError(f"conversations: {len(flags)} flags for {len(samples)} samples")
    body = [f"<h1>{html.escape(title)}</h1>",
            "<p>One colour per document; <span class='masked'>struck through</span>: "
            "loss-masked; <span class='eod'>eod</span>: end of document; hover a run for "
            "its document, segment and token positions.</p>"]
    if any(flags):
        body.append(
            "<p>Conversation samples: <span class='trained'>trained</span>: positions whose "
            "label (the next token) trains (loss mask 1); <span class='context'>dimmed"
            "</span>: context, not trained.</p>"
        )
    for (heading, tokens, sample_runs), conversation in zip(samples, flags):
        colours: dict[int, str] = {}
        spans = []
        previous = None
        for run in sample_runs:
            colour = colours.setdefault(run.document, PALETTE[len(colours) % len(PALETTE)])
            where = (run.document, run.segment)
            if where != previous:
                spans.append(f"<span class='mark'>{html.escape(_label(run))}</span>")
                previous = where
            text = "eod" if run.eod else decode(tokenizer, tokens[run.start : run.stop])
            classes = _classes(run, conversation)
            tip = f"{_label(run)}, tokens {run.start}..{run.stop - 1}"
            style = "" if run.eod else f" style='background:{colour}'"
            spans.append(
                f"<span class='{classes}'{style} title='{html.escape(tip)}'>"
                f"{html.escape(text)}</span>"
            )
        body.append(
            f"<div class='sample'><h2>{html.escape(heading)}</h2>"
            f"<div class='text'>{''.join(spans)}</div></div>"
        )
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
