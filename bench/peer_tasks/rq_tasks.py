"""RQ: a plain function is a job; the worker imports it by its dotted path."""


def noop() -> None:
    """Does nothing."""
