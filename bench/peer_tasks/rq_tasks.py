"""RQ: a plain function is a job; the worker imports it by its dotted path."""


def noop() -> None:
    """Does nothing."""


def incr() -> None:
    """One Redis round trip: counts itself done."""
    from bench.peer_tasks.counter import count_done

    count_done("rq")


def stamp(token: str) -> None:
    """Stamps when it started (bench/trickle.py)."""
    from bench.peer_tasks.counter import stamp as _stamp

    _stamp("rq", token)
