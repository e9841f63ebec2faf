"""RQ: a plain function is a job; the worker imports it by its dotted path."""


def noop() -> None:
    """Does nothing."""


def incr() -> None:
    """One Redis round trip: counts itself done."""
    from bench.peer_tasks.counter import count_done

    count_done("rq")
