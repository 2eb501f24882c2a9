"""A conversation corpus blended with a plain one, and the oracle of its trained labels,
for the tests that follow the role-based loss mask through the trainers.

Tokens name their corpus position: the conversation corpus holds ``1 + position``, the
plain corpus ``PLAIN_BASE + position`` (uint16 both, as Megatron writes small
vocabularies), so a sample's row tells which member it came from and every label's role
is looked up directly in the roles written here.
"""

from __future__ import annotations

import json
import os

import numpy as np

import megadata_core as mdc
from megadata_core.format.roles import Role

#: The first token of the plain corpus (a conversation token is below it).
PLAIN_BASE = 30000
SEQ = 16
ASSISTANT_ONLY = frozenset({Role.ASSISTANT, Role.END_OF_TURN})


def trained_roles(only: bool = True, thinking: bool = False, tools: bool = False) -> frozenset:
    """The roles whose labels train under the three switches (docs/conversations.md),
    written out independently of the core's table."""
    if not only:
        return frozenset(Role) - {Role.TOOL}
    return (ASSISTANT_ONLY | ({Role.REASONING} if thinking else set())
            | ({Role.TOOL_CALL} if tools else set()))


class Corpora:
    """``chat`` (a conversation corpus: ``chat.bin/.idx`` + ``chat_roles.bin/.idx``) and
    ``plain`` (no roles) under ``directory``; ``roles`` uint8 [tokens of chat] and
    ``ends`` int64 [conversations] (the end of each conversation in corpus positions)."""

    def __init__(self, directory: str, conversations: int = 60, documents: int = 50,
                 seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.chat = os.path.join(directory, "chat")
        self.plain = os.path.join(directory, "plain")
        chats = []
        for _ in range(conversations):  # every role, assistant turns common
            roles = rng.choice(len(Role), int(rng.integers(4, 24)),
                               p=[0.15, 0.05, 0.2, 0.3, 0.05, 0.1, 0.1, 0.05])
            chats.append(roles.astype(np.uint8))
        position = 1
        with mdc.IndexedDatasetWriter(self.chat, dtype=np.uint16) as tokens, \
                mdc.IndexedDatasetWriter(self.chat + "_roles", dtype=np.uint8) as codes:
            for roles in chats:
                count = len(roles)
                tokens.add_document(np.arange(position, position + count), [count])
                codes.add_document(roles, [count])
                position += count
        self.roles = np.concatenate(chats)
        self.ends = np.cumsum([len(roles) for roles in chats])
        position = PLAIN_BASE
        with mdc.IndexedDatasetWriter(self.plain, dtype=np.uint16) as tokens:
            for count in rng.integers(3, 30, documents):
                tokens.add_document(np.arange(position, position + count), [int(count)])
                position += int(count)

    def blend_fields(self) -> dict:
        """GPTDataConfig fields of the two members, half and half, all for training."""
        return {"blend": ((self.chat, self.plain), (0.5, 0.5)), "split": "1,0,0"}

    def write_json(self, path: str, **fields) -> str:
        """A JSON data config (adapters/trainers/data_json.py) of the blend and ``fields``."""
        values = {"blend": [[self.chat, self.plain], [0.5, 0.5]], "split": "1,0,0", **fields}
        with open(path, "w", encoding="utf-8") as file:
            json.dump(values, file)
        return path

    def chat_rows(self, tokens: np.ndarray) -> np.ndarray:
        """bool [B]: the rows of a batch [B, S] that come from the conversation corpus."""
        return np.asarray(tokens)[:, 0] < PLAIN_BASE

    def label_roles(self, labels: np.ndarray) -> np.ndarray:
        """The role of each label [B, S] of conversation rows (int; -1 off the corpus)."""
        at = np.asarray(labels, dtype=np.int64) - 1
        inside = (at >= 0) & (at < len(self.roles))
        found = self.roles[np.clip(at, 0, len(self.roles) - 1)].astype(np.int64)
        return np.where(inside, found, -1)  # (int64 first: -1 is no uint8 in NumPy 2.5)

    def expected_mask(self, tokens: np.ndarray, labels: np.ndarray,
                      roles: frozenset = ASSISTANT_ONLY) -> np.ndarray:
        """bool [B, S]: which labels train. Plain rows: every label (concat samples, no
        EOD masking). Conversation rows: the label is the next token of the input's own
        conversation and of a trained role."""
        tokens = np.asarray(tokens, dtype=np.int64)
        labels = np.asarray(labels, dtype=np.int64)
        at_token, at_label = tokens - 1, labels - 1
        same = (np.searchsorted(self.ends, at_token, "right")
                == np.searchsorted(self.ends, at_label, "right"))
        role_trains = np.isin(self.label_roles(labels), sorted(int(r) for r in roles))
        chat = (tokens > 0) & (labels == tokens + 1) & same & role_trains
        return np.where(self.chat_rows(tokens)[:, None], chat, True)
