"""The compat layer's validation error: a DataError that is also an AssertionError.

Megatron validates with ``assert``; callers (Megatron's own tests among them) catch
``AssertionError``. Raising this keeps those callers working while the message names the
field and value, as every megadata error does.
"""

from megadata_core.errors import DataError


class MegatronCompatError(DataError, AssertionError):
    """Bad configuration or input where megatron-core would fail an ``assert``."""


def require(condition: object, message: str) -> None:
    """Raise :class:`MegatronCompatError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise MegatronCompatError(message)
