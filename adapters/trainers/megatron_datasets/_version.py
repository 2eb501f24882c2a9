"""Which megatron-core the drop-in answers as: the one installed beside it.

The drop-in mirrors what changed between releases where a caller can observe it: in
0.19, ``GPTDataset._query_document_sample_shuffle_indices`` returns
``(text, document_ids, document_lengths)`` (three values, the lengths before padding),
where 0.16.1 - 0.18 return ``(text, document_ids)``. Without megatron-core installed the
drop-in answers as the newest release it knows (0.19).
"""

from __future__ import annotations

import functools
import re
from importlib import metadata

NEWEST = (0, 19)


@functools.cache
def megatron_version() -> tuple[int, int]:
    """``(major, minor)`` of the installed megatron-core, or :data:`NEWEST`."""
    try:
        text = metadata.version("megatron-core")
    except metadata.PackageNotFoundError:
        return NEWEST
    found = re.match(r"(\d+)\.(\d+)", text)
    return (int(found[1]), int(found[2])) if found else NEWEST


def query_returns_lengths() -> bool:
    """Whether ``_query_document_sample_shuffle_indices`` returns the documents' lengths
    as a third value (megatron-core 0.19 and later)."""
    return megatron_version() >= (0, 19)
