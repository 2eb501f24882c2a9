"""The per-token roles of a conversation corpus: a sibling ``.bin/.idx`` beside its tokens.

A conversation corpus is an ordinary token corpus ``PREFIX.bin/.idx`` (stock Megatron
reads it as plain tokens: one document per conversation) and, beside it, the corpus
``PREFIX_roles.bin/.idx``: uint8, one :class:`Role` code per token, with the same
sequence lengths and document boundaries as the tokens. Which roles train is chosen when
samples are made, not when the corpus is written.
"""

from __future__ import annotations

import enum
import os

import numpy as np

from megadata_core.errors import DataError
from megadata_core.format.sources import (
    has_scheme,
    is_local,
    local_path,
    open_source,
    split_scheme,
)

#: The suffix of the roles corpus' prefix: ``/data/chat_text_document`` ->
#: ``/data/chat_text_document_roles``.
ROLES_SUFFIX = "_roles"

ROLE_DTYPE = np.uint8


class Role(enum.IntEnum):
    """What a token of a rendered conversation is (uint8 codes, stable on disk)."""

    TEMPLATE = 0      # the template's own text: headers, separators, BOS, generation prompts
    SYSTEM = 1        # a system message's content
    USER = 2          # a user message's content
    ASSISTANT = 3     # an assistant message's content
    END_OF_TURN = 4   # the assistant's end-of-turn token (trained with its content)
    REASONING = 5     # an assistant's reasoning segment
    TOOL_CALL = 6     # an assistant's tool calls
    TOOL = 7          # a tool's response (never trained)


def roles_prefix(prefix: str) -> str:
    """The path prefix of the roles corpus beside the token corpus at ``prefix``."""
    return prefix + ROLES_SUFFIX


def has_roles(prefix: str) -> bool:
    """Whether a roles corpus sits beside the token corpus at ``prefix``: local files, or
    at a URL the roles ``.idx`` its store finds (one request; a store that cannot answer
    raises its DataError, so that a conversation corpus never reads as plain text)."""
    sibling = roles_prefix(prefix)
    if is_local(prefix):
        path = local_path(sibling)
        return os.path.isfile(path + ".idx") and os.path.isfile(path + ".bin")
    scheme, _ = split_scheme(prefix)
    if scheme is None or not has_scheme(scheme):  # no stored corpus (Megatron's mock://)
        return False
    source = None
    try:
        source = open_source(sibling + ".idx")
        source.size()
    except DataError as error:
        if "not found" in str(error).lower():
            return False
        raise
    finally:
        if source is not None:
            source.close()
    return True


def check_role_codes(codes: np.ndarray, where: str) -> None:
    """Refuse role codes [N] that are no :class:`Role` (a DataError naming ``where``)."""
    if codes.size and int(codes.max()) >= len(Role):
        bad = int(codes[np.argmax(codes >= len(Role))])
        raise DataError(f"{where}: role code {bad} is not a Role (0..{len(Role) - 1})")
