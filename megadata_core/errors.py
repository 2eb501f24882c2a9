"""The one public error type of megadata."""


class DataError(ValueError):
    """Bad input data or configuration.

    Messages name the file or config field and the offending value.
    """
