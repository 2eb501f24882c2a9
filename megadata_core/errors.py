"""Floor 0: the one public error type of megadata, and the kinds of it callers tell apart
by type (imports nothing)."""


class DataError(ValueError):
    """Bad input data or configuration.

    Messages name the file or config field and the offending value.
    """


class OversampledError(DataError):
    """A blend asks a member dataset for more samples than it holds (Megatron raises an
    IndexError there; its drop-in raises one of both kinds)."""
