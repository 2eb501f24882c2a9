"""The roles of a conversation member, read with the same pieces as its tokens.

A blend member whose prefix has a roles sibling (:func:`~megadata_core.format.roles.has_roles`:
``PREFIX_roles.bin/.idx`` beside ``PREFIX.bin/.idx``) is a conversation corpus. Its GPT
dataset opens the sibling once (:func:`open_roles`: refused unless uint8 with the tokens'
sequence lengths and document boundaries) and reads, for every batch, the role of every
text position with the pieces the tokens were read with (:func:`batch_roles`, the same
vectorized gather); :meth:`~megadata_core.modes.trained_roles.TrainedRoles.labels` turns
them into the trained label positions. The dataset multiplies its loss mask by them and
also masks every label that crosses into another document piece (another conversation),
whatever ``mask_cross_document_labels`` says (docs/conversations.md). A
:class:`~megadata_core.format.chain.CorpusChain` (the windows of raw shards) has as its
sibling the chain of its parts' roles (``chain.roles``), checked the same way.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from megadata_core.datasets import reading
from megadata_core.errors import DataError
from megadata_core.format.chain import CorpusChain
from megadata_core.format.reader import IndexedDataset, bin_path_of, idx_path_of
from megadata_core.format.roles import ROLE_DTYPE, Role, check_role_codes, has_roles, roles_prefix
from megadata_core.modes import Pieces

#: The role of padding positions in a batch's roles: never trained.
PAD_ROLE = int(Role.TOOL)


def _first_difference(ours: np.ndarray, theirs: np.ndarray) -> str:
    if len(ours) != len(theirs):
        return f"{len(ours)} entries, the tokens' {len(theirs)}"
    at = int(np.argmax(ours != theirs))
    return f"entry {at} is {int(ours[at])}, the tokens' {int(theirs[at])}"


def _named(corpus, path_of) -> str:
    """A corpus's file (``path_of(prefix)``), or a chain's parts' files."""
    if isinstance(corpus, CorpusChain):
        names = dict.fromkeys(_named(part, path_of) for part, _, _ in corpus.parts)
        return f"the chain of {', '.join(names)}"
    return path_of(corpus.path_prefix)


def open_roles(indexed, mmap: bool = True) -> IndexedDataset | CorpusChain | None:
    """The roles corpus beside the local token corpus ``indexed`` (an IndexedDataset with
    a ``path_prefix``; or a CorpusChain: its ``roles`` chain), or None when it has none
    (or is no local prefix).

    Raises:
        DataError: naming the roles ``.idx``: its dtype is not uint8, or its sequence
            lengths or document boundaries differ from the tokens'.
    """
    if isinstance(indexed, CorpusChain):
        if indexed.roles is None:
            return None
        return _checked(indexed.roles, indexed, _named(indexed.roles, idx_path_of),
                        _named(indexed, idx_path_of))
    prefix = getattr(indexed, "path_prefix", None)
    if not isinstance(prefix, str) or not has_roles(prefix):
        return None
    sibling = roles_prefix(prefix)
    roles = _checked(IndexedDataset(sibling, mmap=mmap), indexed, idx_path_of(sibling),
                     idx_path_of(prefix))
    roles.share_open_files(getattr(indexed, "_open_files", None))
    return roles


def _checked(roles, indexed, where: str, tokens: str):
    """``roles`` when it is uint8 with the tokens' sequences and documents (``where``
    and ``tokens`` name the two in the DataError)."""
    if np.dtype(roles.dtype) != ROLE_DTYPE:
        raise DataError(
            f"{where}: dtype {np.dtype(roles.dtype)}, but a roles corpus holds one uint8 "
            "Role code per token"
        )
    for name, what in (("sequence_lengths", "sequence lengths"),
                       ("document_indices", "document boundaries")):
        ours, theirs = np.asarray(getattr(roles, name)), np.asarray(getattr(indexed, name))
        if len(ours) != len(theirs) or not np.array_equal(ours, theirs):
            raise DataError(
                f"{where}: its {what} differ from those of the tokens ({tokens}: "
                f"{_first_difference(ours, theirs)}); a roles corpus has one code per "
                "token, document for document"
            )
    return roles


_OPENED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # corpus -> roles or None
_OPENING = threading.Lock()


def roles_of(indexed, mmap: bool = True) -> IndexedDataset | CorpusChain | None:
    """:func:`open_roles` of ``indexed``, once per corpus object (its datasets of every
    split and the siblings over it share the answer; nothing of it is pickled: a worker
    opens its own). A corpus that cannot be weakly referenced is opened every call."""
    try:
        return _OPENED[indexed]
    except KeyError:
        pass
    except TypeError:  # not weakly referenceable
        return open_roles(indexed, mmap)
    with _OPENING:
        if indexed not in _OPENED:
            _OPENED[indexed] = open_roles(indexed, mmap)
        return _OPENED[indexed]


def batch_roles(roles: IndexedDataset | CorpusChain, pieces: Pieces, width: int
                ) -> np.ndarray:
    """uint8 [B, width] the role of every text position of a batch's ``pieces`` (the
    pieces its tokens were read with), :data:`PAD_ROLE` on padding.

    Raises:
        DataError: naming the roles ``.bin``: a code that is no Role.
    """
    check = getattr(roles, "check_files", None)
    if check is not None:
        check()
    codes, _ = reading.gather_tokens(
        roles, pieces, width, PAD_ROLE, np.dtype(ROLE_DTYPE), reading.flat_tokens(roles),
        np.empty,
    )
    check_role_codes(codes.reshape(-1), _named(roles, bin_path_of))
    return codes
