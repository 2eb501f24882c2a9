"""The tests' one corpus writer: a ``.bin``/``.idx`` pair of given document lengths."""

from __future__ import annotations

import numpy as np

import megadata_core as mdc


def write_corpus(
    prefix: str,
    lengths,
    rng: np.random.Generator | None = None,
    *,
    tokens=None,
    dtype=np.uint16,
    low: int = 0,
    vocab: int = 50,
    eod: int | None = None,
    eod_rate: float | None = None,
    one_document: bool = False,
) -> str:
    """Write one sequence of ``lengths[i]`` tokens per document (``lengths`` int [D]) and
    return ``prefix``.

    The tokens (``dtype`` [sum(lengths)]) are ``tokens`` as given, or drawn from ``rng``
    uniform in ``[low, vocab)``; then, with ``eod_rate``, that share of them (drawn from
    ``rng``) become ``eod``; with ``eod``, every non-empty sequence ends in it (as
    preprocessing does). ``one_document``: every sequence in one document (Megatron's
    ``add_document(tokens, lengths)``; the GPT datasets read sequences)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if tokens is None:
        assert rng is not None, "write_corpus draws its tokens from rng"
        tokens = rng.integers(low, vocab, int(lengths.sum()))
    tokens = np.asarray(tokens).astype(dtype)
    if eod_rate is not None:
        assert rng is not None and eod is not None, "eod_rate needs rng and eod"
        tokens[rng.random(tokens.size) < eod_rate] = eod
    if eod is not None:
        tokens[np.cumsum(lengths)[lengths > 0] - 1] = eod
    with mdc.IndexedDatasetWriter(prefix, dtype) as writer:
        if one_document:
            writer.add_document(tokens, lengths.tolist())
        else:
            writer.add_documents(tokens, lengths)
    return prefix
