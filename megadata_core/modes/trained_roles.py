"""Which roles of a conversation corpus train: the three switches of a config, one object.

``GPTDataConfig(train_on_assistant_responses_only=..., train_on_thinking_traces=...,
train_on_tool_calls=...)`` (megatron-core's names) is parsed once into a
:class:`TrainedRoles` (the config's ``trained_roles_mode``): a bool table over the
:class:`~megadata_core.format.roles.Role` codes that a dataset reading a roles corpus
looks its label roles up in. The rule:

* ``ASSISTANT`` and ``END_OF_TURN`` always train; ``TOOL`` (a tool's response) never;
* with ``train_on_assistant_responses_only`` (the default), ``REASONING`` trains only
  with ``train_on_thinking_traces`` and ``TOOL_CALL`` only with ``train_on_tool_calls``;
  ``TEMPLATE``, ``SYSTEM`` and ``USER`` do not;
* without it, every role but ``TOOL`` trains (the two other switches then change
  nothing).

It changes only the loss mask of members that have roles (never an index array), so it
is no part of a cache key or fingerprint; :meth:`TrainedRoles.describe` says what it is
where a loss mask is described (docs/conversations.md).
"""

from __future__ import annotations

import numpy as np

from megadata_core.format.roles import Role


class TrainedRoles:
    """The roles whose tokens train as labels (see the module docstring).

    Attributes:
        assistant_only, thinking, tool_calls: the three switches as given.
        table: bool [len(Role)], read-only: ``table[code]`` is whether a label of that
            role code trains.
    """

    kind = "trained_roles"

    def __init__(self, assistant_only: bool = True, thinking: bool = False,
                 tool_calls: bool = False) -> None:
        self.assistant_only = bool(assistant_only)
        self.thinking = bool(thinking)
        self.tool_calls = bool(tool_calls)
        table = np.zeros(len(Role), dtype=bool)
        if self.assistant_only:
            table[[Role.ASSISTANT, Role.END_OF_TURN]] = True
            table[Role.REASONING] = self.thinking
            table[Role.TOOL_CALL] = self.tool_calls
        else:
            table[:] = True
        table[Role.TOOL] = False
        table.flags.writeable = False
        self.table = table

    @classmethod
    def of(cls, config) -> TrainedRoles:
        """The trained roles of a config's three (checked) switches."""
        return cls(config.train_on_assistant_responses_only,
                   config.train_on_thinking_traces, config.train_on_tool_calls)

    @property
    def roles(self) -> tuple[Role, ...]:
        """The roles that train, in code order."""
        return tuple(Role(int(code)) for code in np.flatnonzero(self.table))

    def describe(self) -> dict:
        """What the loss mask of a roles member depends on: the switches and the roles
        they train (names, code order)."""
        return {
            "train_on_assistant_responses_only": self.assistant_only,
            "train_on_thinking_traces": self.thinking,
            "train_on_tool_calls": self.tool_calls,
            "trained_roles": [role.name for role in self.roles],
        }

    def labels(self, codes: np.ndarray, sequence_length: int) -> np.ndarray:
        """bool [B, S]: whether the label at each position trains by its role.

        Args:
            codes: uint8 [B, S + extra] the role of every text position (checked codes);
                the label at position t is text position t + 1.
            sequence_length: S; without the extra token (width S) the last position's
                label is padding: False.
        """
        batch, width = codes.shape
        trained = np.zeros((batch, sequence_length), dtype=bool)
        shifted = codes[:, 1:]
        np.take(self.table, shifted, out=trained[:, : shifted.shape[1]])
        return trained

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TrainedRoles) and bool((self.table == other.table).all())

    def __hash__(self) -> int:
        return hash(self.table.tobytes())

    def __repr__(self) -> str:
        return f"<trained_roles {'+'.join(role.name for role in self.roles)}>"
