"""Where a run writes: a hidden directory of its own beside the outputs, published at the end.

Every file of a run (shards, merged corpora, the writers' temporaries) lives in
``.{name}.partial.{pid}@{host}.{random}.tmp/`` next to ``{output_prefix}``, so nothing
gets a corpus-style name before every output is complete. Then the outputs (and kept
shards) are renamed into place and the directory is removed. A killed run leaves only
that directory; the next run for the same ``output_prefix`` removes it once its writer
is known dead (``megadata_core.files.temporary``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence

import numpy as np

from megadata_core.errors import DataError
from megadata_core.files import temporary as temp_files
from megadata_core.files.interrupts import interrupts_deferred
from megadata_core.format import IndexedDatasetWriter
from megadata_core.format.reader import bin_path_of, idx_path_of


class Staging:
    """The private directory of one run writing the corpora ``final_prefixes``.

    Created at once, so an unwritable output directory fails before any work;
    ``publish`` moves finished corpora into place; ``remove`` (or leaving the
    ``with`` block) deletes whatever is left.
    """

    def __init__(self, output_prefix: str, final_prefixes: Sequence[str]) -> None:
        self.directory = os.path.dirname(os.path.abspath(output_prefix))
        if not os.path.isdir(self.directory):
            what = "is not a directory" if os.path.exists(self.directory) else "does not exist"
            raise DataError(f"output_prefix: directory {self.directory} {what}")
        longest = max((os.path.basename(p) for p in final_prefixes), key=len)
        temp_files.check_name_fits(self.directory, f"{longest}.idx", "output_prefix")
        label = staging_label(output_prefix)
        temp_files.remove_stale(self.directory, [label])
        try:
            self.path = temp_files.create_directory(self.directory, label)
        except OSError as error:
            raise DataError(
                f"output_prefix: cannot write in directory {self.directory}: "
                f"{error.strerror or error}"
            ) from None

    def staged(self, final_prefix: str) -> str:
        """Where the corpus that becomes ``final_prefix`` is written."""
        return os.path.join(self.path, os.path.basename(final_prefix))

    def publish(self, final_prefixes: Sequence[str]) -> None:
        """Rename the staged corpora onto their final names (.bin first, then .idx), all
        of them or (on an error) what was renamed before it; Ctrl-C waits until all are
        (:func:`~megadata_core.files.interrupts.interrupts_deferred`), so a ``.bin`` never
        sits beside another run's ``.idx``."""
        with interrupts_deferred():
            for prefix in final_prefixes:
                staged = self.staged(prefix)
                os.replace(bin_path_of(staged), bin_path_of(prefix))
                os.replace(idx_path_of(staged), idx_path_of(prefix))

    def remove(self) -> None:
        """Remove the directory and whatever is left in it (Ctrl-C waits until it is)."""
        with contextlib.suppress(FileNotFoundError), interrupts_deferred():
            temp_files.remove_tree(self.path)

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc_info) -> None:
        self.remove()


def staging_label(output_prefix: str) -> str:
    """The temporary label of the staging directories of ``output_prefix``."""
    return f"{os.path.basename(output_prefix)}.partial"


@contextlib.contextmanager
def staging_for(output_prefix: str, final_prefixes: Sequence[str]) -> Iterator[Staging]:
    """A :class:`Staging` for the block, removed however the block ends: also when a
    Ctrl-C lands while it is made (after its directory exists) or in its ``__exit__``
    before the removal, which ``with Staging(...)`` alone leaves open."""
    try:
        with Staging(output_prefix, final_prefixes) as made:
            yield made
    except BaseException:
        with interrupts_deferred():
            directory = os.path.dirname(os.path.abspath(output_prefix))
            temp_files.remove_own(directory, [staging_label(output_prefix)])
        raise


def write_documents(
    writer: IndexedDatasetWriter,
    tokens: np.ndarray,
    sequence_lengths: np.ndarray,
    document_sequences: np.ndarray,
    mask: np.ndarray | None = None,
) -> None:
    """Append documents (``document_sequences[d]`` sequences each), or those where ``mask``."""
    if mask is not None:
        bounds = np.concatenate([[0], np.cumsum(sequence_lengths)])
        ends = np.cumsum(document_sequences)
        starts = ends - document_sequences
        tokens = tokens[np.repeat(mask, bounds[ends] - bounds[starts])]
        sequence_lengths = sequence_lengths[np.repeat(mask, document_sequences)]
        document_sequences = document_sequences[mask]
    writer.add_documents(tokens, sequence_lengths, document_sequences)
