"""Floor 0: the one public error type of megadata (imports nothing)."""


class DataError(ValueError):
    """Bad input data or configuration.

    Messages name the file or config field and the offending value.
    """
