"""The ``batch`` and ``where`` commands of tools/inspect_data.py: which documents training
step N read, and which samples (and steps) read document D.

Both work from the index arrays (:mod:`megadata_core.datasets.provenance` and
:mod:`megadata_core.datasets.provenance`); ``batch`` reads only the few tokens of
its previews (and, with ``--html``, the step's samples). Steps are those of Megatron's
sequential sampler (``--dataloader-type single``, :class:`PretrainingSampler`): step N
reads the global samples that follow the ones consumed by steps 0 .. N-1, each step the
global batch size (or the step batch-size schedule's size) of them, and data-parallel
rank r the ``micro_batch_size`` samples at ``r * micro_batch_size`` of every group of
``micro_batch_size * data_parallel_size``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from megadata_core import DataError
from megadata_core.batch_ramp import BatchSizeSchedule
from megadata_core.datasets import inspection, provenance
from megadata_core.files.atomic import write_atomically


@dataclass(frozen=True)
class Steps:
    """How global samples become training steps (see the module docstring)."""

    global_batch_size: int
    schedule: BatchSizeSchedule | None
    micro_batch_size: int
    data_parallel_size: int

    def options(self) -> dict:
        return {
            "global_batch_size": self.global_batch_size, "schedule": self.schedule,
            "micro_batch_size": self.micro_batch_size,
            "data_parallel_size": self.data_parallel_size,
        }


def _prefix(member) -> str:
    return getattr(member.indexed, "path_prefix", "?")


def preview(member, document: int, start: int, length: int, tokens: int, tokenizer) -> str:
    """The first ``tokens`` tokens of a segment, decoded (token ids without a tokenizer),
    with ``...`` when the segment is longer."""
    count = min(length, tokens)
    values = np.asarray(member.indexed.get(document, offset=start, length=count))
    if tokenizer is None:
        text = " ".join(str(value) for value in values.tolist())
    else:
        text = tokenizer.decode(values.tolist())
    text = text.replace("\n", "\\n")
    return text + (" ..." if length > count else "")


def segment_lines(segments, row: int, members, preview_tokens: int, tokenizer) -> list[str]:
    """One line per segment of sample ``row``: text columns, dataset, document, token
    range inside the document, preview."""
    lines = []
    part = segments.of(row)
    for column, dataset, document, start, length in zip(
        segments.column[part].tolist(), segments.dataset_id[part].tolist(),
        segments.document[part].tolist(), segments.start[part].tolist(),
        segments.length[part].tolist(),
    ):
        member = members[dataset]
        shown = preview(member, document, start, length, preview_tokens, tokenizer)
        lines.append(
            f"    text [{column}, {column + length}): dataset {dataset} {_prefix(member)} "
            f"document {document} tokens [{start}, {start + length}) | {shown}"
        )
    return lines


def batch_report(dataset, split: str, step: int, steps: Steps, rank: int | None,
                 preview_tokens: int, tokenizer) -> tuple[list[str], np.ndarray, object]:
    """The printed report of step ``step``: lines, the global samples, their segments."""
    positions = provenance.step_samples(step, data_parallel_rank=rank, **steps.options())
    if len(positions) and positions[-1] >= len(dataset):
        raise DataError(
            f"step: step {step} reads samples {int(positions[0]):,}..{int(positions[-1]):,} "
            f"but the {split} split holds {len(dataset):,}"
        )
    segments = provenance.batch_segments(dataset, positions)
    _, ranks = provenance.sample_steps(positions, **steps.options())
    members = inspection.members(dataset)
    who = "all data-parallel ranks" if rank is None else f"data-parallel rank {rank}"
    width = segments.width
    lines = [
        f"step {step} of {split}: global samples {int(positions[0]):,}..{int(positions[-1]):,}"
        f" ({len(positions)} samples, {who} of {steps.data_parallel_size}, micro batch "
        f"{steps.micro_batch_size}); text of a sample: {width} tokens"
    ]
    for row, position in enumerate(positions.tolist()):
        j = int(segments.sample_dataset[row])
        part = segments.of(row)
        real = int(segments.length[part].sum())
        pad = f", {width - real} padding" if real < width else ""
        lines.append(
            f"  sample {position} (rank {int(ranks[row])}): dataset {j} "
            f"{_prefix(members[j])}, its sample {int(segments.member_sample[row])}; "
            f"{part.stop - part.start} segment(s){pad}"
        )
        lines.extend(segment_lines(segments, row, members, preview_tokens, tokenizer))
    return lines, positions, segments


def token_documents(segments, row: int, width: int) -> np.ndarray:
    """int64 [width]: each text position's document in sample ``row``, -1 for padding."""
    out = np.full(width, -1, dtype=np.int64)
    part = segments.of(row)
    for column, length, document in zip(segments.column[part].tolist(),
                                        segments.length[part].tolist(),
                                        segments.document[part].tolist()):
        out[column : column + length] = document
    return out


def batch_html(path: str, title: str, dataset, positions, segments, eod, tokenizer) -> str:
    """The step's samples as a colour-coded page (tools/inspect_samples.py), each headed
    by its segments."""
    from megadata_cli import inspect_samples

    batch = dataset.__getitems__(positions)
    members = inspection.members(dataset)
    pages, conversations = [], []
    for row, position in enumerate(positions.tolist()):
        tokens = np.asarray(batch["tokens"][row])
        documents = token_documents(segments, row, segments.width)[: len(tokens)]
        segment_marks = batch.get("segment_ids")
        marks = None if segment_marks is None else np.asarray(segment_marks[row])
        runs = inspect_samples.runs(tokens, documents, np.asarray(batch["loss_mask"][row]),
                                    marks, eod)
        j = int(segments.sample_dataset[row])
        part = segments.of(row)
        listed = "; ".join(
            f"doc {d} [{s}, {s + n})" for d, s, n in zip(
                segments.document[part].tolist(), segments.start[part].tolist(),
                segments.length[part].tolist())
        )
        heading = f"sample {position}: dataset {j} {_prefix(members[j])}: {listed}"
        pages.append((heading, tokens, runs))
        conversations.append(inspect_samples.is_conversation(members[j]))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    page = inspect_samples.as_html(title, pages, tokenizer, conversations).encode("utf-8")
    write_atomically(path, lambda stream: stream.write(page))
    return path


def members_named(dataset, prefix: str) -> list[int]:
    """The members of a split whose corpus is ``prefix`` (a path, compared normalized;
    a prefix may appear in a blend more than once)."""
    members = inspection.members(dataset)
    wanted = os.path.normpath(os.path.abspath(prefix))
    found = [
        j for j, member in enumerate(members)
        if os.path.normpath(os.path.abspath(_prefix(member))) == wanted
    ]
    if not found:
        names = ", ".join(_prefix(member) for member in members[:4])
        raise DataError(f"prefix: {prefix!r} is not a dataset of this split ({len(members)} "
                        f"dataset(s): {names}{', ...' if len(members) > 4 else ''})")
    return found


def where_report(dataset, split: str, prefix: str, document: int,
                 steps: Steps) -> tuple[list[str], np.ndarray]:
    """The printed report of document ``document`` of ``prefix``: lines and the samples
    (int64 [K], sorted) that hold its tokens."""
    lines, hits = [], []
    for j in members_named(dataset, prefix):
        positions = provenance.where_document(dataset, j, document)
        hits.append(positions)
        lines.append(f"document {document} of {prefix} (dataset {j} of the {split} split): "
                     f"in {len(positions):,} sample(s)")
        if not len(positions):
            continue
        segments = provenance.batch_segments(dataset, positions)
        step, rank = provenance.sample_steps(positions, **steps.options())
        for row, position in enumerate(positions.tolist()):
            part = segments.of(row)
            mine = np.flatnonzero((segments.document[part] == document)
                                  & (segments.dataset_id[part] == j)) + part.start
            ranges = ", ".join(
                f"tokens [{s}, {s + n}) at text [{c}, {c + n})" for s, n, c in zip(
                    segments.start[mine].tolist(), segments.length[mine].tolist(),
                    segments.column[mine].tolist())
            )
            lines.append(f"  sample {position} (step {int(step[row])}, rank "
                         f"{int(rank[row])}): {ranges}")
    found = np.unique(np.concatenate(hits)) if hits else np.zeros(0, np.int64)
    return lines, found
