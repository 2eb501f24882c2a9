"""How large each member of a build is, from its corpus's lengths alone (nothing built).

The builder asks it to choose where a member's index is built (memory or the cache); a
tool that prints a build's plan (``build_index --dry_run``) asks it for every member's
documents, tokens, epochs and samples. Both follow the rules the index build follows
(the packing mode's ``size``), with its errors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from megadata_core.build.plan import Job
from megadata_core.datasets import gpt_arrays
from megadata_core.indices import num_epochs, splits


@dataclass(frozen=True)
class MemberSize:
    """A member's ``documents``, ``tokens`` per epoch, ``epochs`` and ``samples`` (what
    its GPTDataset will hold: whole epochs, so at least the samples asked for)."""

    documents: int
    tokens: int
    epochs: int
    samples: int


def member_documents(job: Job, count: int) -> range:
    """The documents of a job's split of a corpus of ``count`` documents."""
    return splits.document_range(job.bookend, count)


def _tokens(lengths: np.ndarray, documents: range) -> int:
    return int(lengths[documents.start : documents.stop].sum(dtype=np.int64))


def index_entries(indexed, job: Job, config, at_least: int | None = None) -> int:
    """The size of a job's index, ``max(document-index entries, samples)`` (documents x
    epochs; epochs x tokens / S). With ``at_least``, a split of that many documents or
    more answers its document count without summing its lengths (a warm start of a
    large corpus reads no array whole; an empty split then fails as it would in memory,
    in the index build)."""
    documents = member_documents(job, len(indexed))
    if at_least is not None and len(documents) >= at_least:
        return len(documents)
    tokens = _tokens(np.asarray(indexed.sequence_lengths), documents)
    if tokens == 0:
        return 0  # the GPTDataset raises, naming the split
    extra = int(config.add_extra_token_to_sequence)
    epochs = num_epochs(tokens, config.sequence_length, job.num_samples, extra)
    return max(len(documents) * epochs, epochs * tokens // config.sequence_length)


def in_memory_jobs(corpora, jobs: list[Job], config, below: int) -> set[Job]:
    """The jobs whose index has fewer than ``below`` entries (:func:`index_entries`;
    ``corpora``: prefix -> corpus)."""
    return {job for job in jobs if index_entries(corpora[job.prefix], job, config, below) < below}


def member_size(lengths: np.ndarray, job: Job, config) -> MemberSize:
    """What a job's GPTDataset will hold, from the corpus's ``lengths`` (int [N]).

    Raises:
        DataError: a split without documents that is asked for samples, or whose
            documents hold no tokens (the index build's errors).
    """
    lengths = np.asarray(lengths)
    documents = member_documents(job, len(lengths))
    tokens = _tokens(lengths, documents)
    if len(documents) == 0 and job.num_samples == 0:
        return MemberSize(0, 0, 0, 0)
    if len(documents) == 0:
        raise gpt_arrays.no_documents(job.split)
    if tokens == 0:
        raise gpt_arrays.no_tokens(job.split, len(documents))
    epochs, samples = config.packing_mode.size(
        lengths[documents.start : documents.stop], tokens, config, job.num_samples,
        gpt_arrays.drops_last(config, job.split),
    )
    return MemberSize(len(documents), tokens, epochs, samples)
