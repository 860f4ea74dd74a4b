"""The one exception the data package raises for user-fixable problems."""


class DataError(ValueError):
    """A bad data source or data setting. The message is one sentence: what is wrong, what to do.

    The CLI turns it into a one-line message on stderr and exit code 2.
    """
