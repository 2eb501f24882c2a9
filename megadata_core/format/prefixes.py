"""What a corpus prefix that names no corpus probably meant: said in its error message.

A prefix names a ``.bin/.idx`` pair without the suffix, and preprocessing appends
``_{key}_document`` (or ``_sentence``) to its ``--output_prefix``. So ``x.bin``, ``x.idx``
and the ``--output_prefix`` itself are common wrong prefixes; :func:`prefix_hint` names
the pair that exists. Only ever called on the error path (it lists a directory).
"""

from __future__ import annotations

import glob
import os

#: The levels preprocessing writes: ``{output_prefix}_{key}_{level}.bin/.idx``.
LEVELS = ("document", "sentence")


def _exists(prefix: str) -> bool:
    return os.path.isfile(prefix + ".idx") and os.path.isfile(prefix + ".bin")


def candidates(prefix: str) -> list[str]:
    """Existing corpus prefixes that ``prefix`` (a local one naming no corpus) likely meant:
    itself without a ``.bin``/``.idx`` suffix, else the corpora preprocessing wrote for it
    as ``--output_prefix`` (``{prefix}_{key}_document``), sorted."""
    stem = prefix[:-4] if prefix.endswith((".bin", ".idx")) else prefix
    if stem != prefix and _exists(stem):
        return [stem]
    found = []
    for level in LEVELS:
        for idx in glob.glob(f"{glob.escape(stem)}_*_{level}.idx"):
            if _exists(idx[:-4]):
                found.append(idx[:-4])
    return sorted(found)


def prefix_hint(prefix: str) -> str:
    """``"; did you mean prefix 'x_text_document'?"`` (or several), or ``""``."""
    try:
        found = candidates(prefix)
    except OSError:
        return ""
    if not found:
        return ""
    named = " or ".join(repr(name) for name in found[:3])
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    why = (
        "a prefix names the .bin/.idx pair without the suffix"
        if prefix.endswith((".bin", ".idx"))
        else "preprocessing writes {output_prefix}_{key}_document"
    )
    return f"; did you mean prefix {named}{more}? ({why})"
