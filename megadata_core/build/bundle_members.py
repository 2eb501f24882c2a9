"""The members of one split of a build bundle, made at first access (a warm start).

:func:`bundle_members` checks every member of a split at once against the bundle's
table of packed arrays (the checks :meth:`GPTDataset._siblings` makes one by one) and
returns a :class:`LazyMembers` whose member j is made, at its first read, by
:class:`BundleMembers` from the split's first member (built and checked in full), its
corpus (a record-described corpus, itself opened at first read) and its arrays' views.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from megadata_core.datasets.lazy_members import LazyMembers
from megadata_core.cache.entries import PackedArrays

#: The array names of a Megatron-shuffled concat member (the only ones made lazily).
CONCAT_NAMES = ("document_index", "sample_index", "shuffle_index")


class BundleMembers:
    """Makes member j of a split: ``template._checked_sibling`` over corpus
    ``corpus_numbers[j]`` of ``corpora`` (indexable by number), documents
    ``[firsts[j], ends[j])``, ``wanted[j]`` samples (-1: None) and the arrays at
    ``arrays[rows[j] : rows[j] + 3]`` (named :data:`CONCAT_NAMES`). Picklable: a worker
    gets the corpora unopened and the bundle's blob as its file name."""

    def __init__(
        self,
        template,
        corpora,
        corpus_numbers: np.ndarray,
        firsts: np.ndarray,
        ends: np.ndarray,
        wanted: np.ndarray,
        arrays: PackedArrays,
        rows: np.ndarray,
    ) -> None:
        self.template = template
        self.corpora = corpora
        self.corpus_numbers = corpus_numbers
        self.firsts, self.ends, self.wanted = firsts, ends, wanted
        self.arrays = arrays
        self.rows = rows

    def __call__(self, number: int):
        if number == 0:
            return self.template
        row = int(self.rows[number])
        given = dict(zip(CONCAT_NAMES, self.arrays[row : row + len(CONCAT_NAMES)]))
        wanted = int(self.wanted[number])
        return self.template._checked_sibling(
            self.corpora.at(int(self.corpus_numbers[number])),
            range(int(self.firsts[number]), int(self.ends[number])),
            None if wanted < 0 else wanted,
            given,
        )


def bundle_members(
    template,
    corpora,
    corpus_numbers: np.ndarray,
    firsts: np.ndarray,
    ends: np.ndarray,
    wanted: Sequence[int | None],
    arrays: PackedArrays,
    rows: np.ndarray,
) -> LazyMembers | None:
    """The split's members as a :class:`LazyMembers` (member 0 is ``template``, already
    made from ``rows[0]``), or None when a member does not pass the shared checks (the
    caller then makes them one by one, which names what is wrong). ``corpora`` has
    ``dtype_codes`` and ``sequences`` (int64 [P]) and ``at(number)``."""
    corpus_numbers = np.asarray(corpus_numbers, dtype=np.int64)
    rows = np.asarray(rows, dtype=np.int64)
    firsts, ends = np.asarray(firsts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    codes, counts = corpora.dtype_codes[corpus_numbers], corpora.sequences[corpus_numbers]
    template_code = corpora.dtype_codes[corpus_numbers[0]]
    lengths = arrays.rows[rows + 1] - 1  # sample_index rows - 1
    shuffles = arrays.rows[rows + 2]
    if (
        template.packing != "concat"
        or sorted(template._arrays) != sorted(CONCAT_NAMES)
        or (codes != template_code).any()
        or (firsts < 0).any()
        or (ends > counts).any()
        or (ends <= firsts).any()
        or (shuffles != lengths).any()
        or (lengths < 0).any()
    ):
        return None
    wanted = np.array([-1 if value is None else value for value in wanted], dtype=np.int64)
    make = BundleMembers(template, corpora, corpus_numbers, firsts, ends, wanted, arrays, rows)
    return LazyMembers(make, lengths, template.split)
