"""A stand-in payment gateway: each charge is kept in Redis (``<prefix>:test:shop:charges``,
"<idempotency key>:<amount>" -> count; ``calls``: idempotency key -> calls), so a test sees
what was charged and how often. Set
``<prefix>:test:shop:outages`` to N and the next N calls raise :class:`Unavailable`; a total
over 10,000 is :class:`Declined`."""

import decimal

from cogworker_django.store import connection, keys


class Unavailable(Exception):
    """The gateway did not answer: worth trying again later."""


class Declined(Exception):
    """The card was refused: trying again changes nothing."""


def key(name: str) -> str:
    return f"{keys.prefix()}:test:shop:{name}"


def charge(amount: decimal.Decimal, *, idempotency_key: str) -> str:
    r = connection.get_client()
    r.hincrby(key("calls"), idempotency_key, 1)
    if r.decr(key("outages")) >= 0:
        raise Unavailable("the gateway did not answer")
    r.delete(key("outages"))
    if amount > 10_000:
        raise Declined(f"{amount} is over the card's limit")
    r.hincrby(key("charges"), f"{idempotency_key}:{amount}", 1)
    return f"ch_{idempotency_key[:8]}"
