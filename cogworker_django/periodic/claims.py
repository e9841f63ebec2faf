"""Claim records: a claimed slot's job kept in Redis until it is pushed, so a process
that dies between claiming a slot and pushing its job does not lose the slot.

The claim script (lua/periodic_claim.lua) writes the record with the claim, in
``P:periodic:claims:<identity>`` under ``"<slot>:<name>"``: ``"c <jid> <payload>"``.
The push removes it in the same step as it pushes (lua/periodic_push.lua), so the record
exists exactly while the job does not:

- the claimer pushes from its record; a push whose reply was lost is told apart from
  one that never ran (the rollback finds the record gone and undoes nothing);
- orphan recovery, once the claimer is judged dead (rule 13), pushes the job from the
  dead process's records (:func:`recover`); two recoverers racing push it once, since
  only one of them finds the record.

The plain push (a list, or a django.tasks priority's zset) and a unique job's lock
script (lua/unique_push.lua) remove the record themselves. The paths that can't (a
batch member, a test-mode sink, a scheduled push) first mark it ``"p <jid>"``
(lua/periodic_mark.lua); a marked record is never pushed again (its push may have
happened), and a rollback finding it marked undoes nothing: at most once, for those
paths the slot may be lost, never doubled.

With a home per queue (keys.spread) the record and the queue are in two slots: the plain
push writes the job to the prefix's outbox in the record's step and relays it from there
(outbox.py), exactly once still; a unique job's lock (in its queue's home) can't share
that step, so it takes the marking path.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ..core import client, payload, route
from ..store import bell, connection, errors, homes, keys, outbox, scripts

log = logging.getLogger("cogworker_django")

CLAIMED = "c"
PUSHING = "p"

# Dead identities whose claims are pushed at once, each on its own thread: a client
# middleware that hangs holds up at most this many (the rest wait for a later pass).
MAX_RECOVERY_THREADS = 4
# A recovery thread running longer than this is logged (once).
SLOW_RECOVERY = 60.0

# (identity, field) of recovered claims whose push failed deterministically: logged once.
# An entry goes when this process pushes that record; one pushed or dropped elsewhere
# stays (a few strings per broken record, for the life of the process).
_failing: set[tuple[str, str]] = set()


def field(name: str, slot: int) -> str:
    """A claim's field in its claimer's hash (a name may hold ':'; the slot comes first)."""
    return f"{slot}:{name}"


def record(job: dict[str, Any]) -> str:
    """The record the claim script stores for ``job`` (built here, not in Lua: rule 3)."""
    return f"{CLAIMED} {job['jid']} {payload.encode(job)}"


def names(value: Any, jid: str) -> bool:
    """Whether a record read back (str or bytes; anything else is not one) is the
    not-yet-pushed claim of ``jid``."""
    if not isinstance(value, (str, bytes)):
        return False
    return connection.text(value).startswith(f"{CLAIMED} {jid} ")


class ClaimedPush:
    """The final write of one claimed slot's job, for :func:`cogworker_django.core.client.push`
    (client.FinalWrite): ``plain`` pushes and removes the record in one step
    (lua/periodic_push.lua); a unique job's lock script does the same with
    :meth:`claim`'s KEYS/ARGV; ``other`` marks the record before any other path.
    ``reached`` says whether the push got past the client middleware; ``gone`` that the
    record was not there any more (pushed already, or taken over), so nothing was
    written; ``marked`` that the record is left marked for the caller to drop."""

    def __init__(self, conn: Any, owner: str, field: str, jid: str) -> None:
        self.conn = conn
        self.key = keys.periodic_claims(owner)
        self.field = field
        self.jid = jid
        self.reached = False
        self.gone = False
        self.marked = False

    def plain(self, queue: str, where: route.Destination) -> bool:
        self.reached = True
        target, value, score = where.key, where.value, where.score_arg
        if homes.Home.of_queue(queue).crosses(homes.Home.root()):
            # The queue is in another slot than the record: the script writes the job to
            # the prefix's outbox with the record's removal, and the relay pushes it to
            # its queue exactly once (outbox.py; the poller relays it if this dies).
            value = outbox.envelope(where.key, where.value, where.score_arg, queue)
            target, score = keys.outbox(), ""
        script_keys = [self.key, target, keys.queues()]
        args = [self.field, self.jid, value, queue, score]
        if target == where.key and score == "":
            # Onto its queue's list: idle workers start it now (store/bell.py), rung by
            # the script only when the push found the list empty.
            bell.add(script_keys, args, queue)
        pushed = scripts.run("periodic_push", self.conn, script_keys, args)
        self.gone = int(pushed) == 0
        if not self.gone and target != where.key:
            outbox.relay(self.conn, [value])  # (rings its queue's doorbell)
        return not self.gone

    def claim(self) -> tuple[str, str, str]:
        self.reached = True
        return self.key, self.field, self.jid

    def unique_result(self, result: int) -> None:
        self.gone = result == -1

    def other(self) -> bool:
        self.reached = True
        marked = int(scripts.run("periodic_mark", self.conn, [self.key], [self.field, self.jid]))
        self.gone = marked == 0
        self.marked = marked == 1
        return not self.gone


def push(conn: Any, owner: str, slot_field: str, job: dict[str, Any]) -> tuple[str | None, bool]:
    """Push ``job`` (the claim ``slot_field`` of ``owner``) through the client middleware.
    Returns (jid or None, gone): None with gone=False when a middleware or the job's own
    unique lock refused it (the record is then dropped: the slot is used up); gone=True
    when the record was not there (nothing pushed by this call). Raises when the push
    fails (the record stays: for the claimer's rollback, or the next recovery pass)."""
    final = ClaimedPush(conn, owner, slot_field, job["jid"])
    jid = client.push(job, final=final)
    if final.gone:
        return None, True
    if jid is None or final.marked or not final.reached:
        # Refused (by a middleware, which may also have swallowed the push's own error,
        # or as a unique duplicate: its script dropped the record already), or pushed by
        # a path that marked the record: the slot is used up and the record goes now. A
        # drop that fails leaves it for recovery once this process is gone: a marked
        # record is dropped there too; a refused one is offered to the middleware again.
        errors.best_effort(
            "Periodic claim",
            lambda: conn.hdel(final.key, slot_field),
            f"{final.key} {slot_field} not dropped",
        )
    return jid, False


def recover(conn: Any, ident: str) -> int:
    """Push the jobs of a dead process's claims that it never pushed; drop its marked
    ones (their push may have happened: at most once). Returns how many were pushed.
    Raises on an outage (the next pass retries: the records stay until pushed)."""
    key = keys.periodic_claims(ident)
    pushed = 0
    for raw_field, raw in conn.hgetall(key).items():
        slot_field, value = connection.text(raw_field), connection.text(raw)
        state, _, rest = value.partition(" ")
        if state != CLAIMED:
            log.warning(
                "periodic claim %s of dead process %s was being pushed when it died: "
                "not pushed again (it may have been)",
                slot_field,
                ident,
            )
            conn.hdel(key, slot_field)
            continue
        jid, _, raw_job = rest.partition(" ")
        job = payload.decode(raw_job)
        if job["func"] == payload.UNPARSEABLE or job["jid"] != jid:
            # Rule 6: one bad record never stops the others (and is not retried forever).
            log.error(
                "periodic claim %s of dead process %s can't be read, dropped: %s",
                slot_field,
                ident,
                job.get("error_message") or "its jid is not the record's",
            )
            conn.hdel(key, slot_field)
            continue
        try:
            pushed_jid, gone = push(conn, ident, slot_field, job)
        except Exception as exc:
            if errors.is_unavailable(exc):
                raise
            # Deterministic (a queue key of the wrong type, until the key guard moves
            # it): kept and retried next pass, logged once (rule 5).
            if (ident, slot_field) not in _failing:
                _failing.add((ident, slot_field))
                log.error(
                    "periodic claim %s of dead process %s not pushed (retried every pass): %s",
                    slot_field,
                    ident,
                    errors.describe(exc),
                )
            continue
        _failing.discard((ident, slot_field))
        if pushed_jid is not None and not gone:
            pushed += 1
            log.warning(
                "periodic %s: pushed slot %s's job %s that dead process %s had claimed "
                "but not pushed",
                job.get("periodic"),
                slot_field.partition(":")[0],
                pushed_jid,
                ident,
            )
    return pushed


class RecoveryPusher:
    """Runs :func:`recover` for orphan recovery on threads of its own, one per dead
    identity at a time: recovering a claim runs the client middleware (user code), and
    a middleware that hangs must hold up only that identity's pushes, never the poller
    that recovery runs on (scheduled jobs and retries would stop moving) nor another
    identity's. A hung push holds its record; nothing is lost, and the first pass after
    it returns picks up what is left."""

    def __init__(self, max_threads: int = MAX_RECOVERY_THREADS) -> None:
        self.max_threads = max_threads
        self._threads: dict[str, tuple[threading.Thread, float]] = {}
        self._slow: set[str] = set()  # logged as slow while their thread still runs

    def submit(self, ident: str) -> bool:
        """Start recovering ``ident``'s claims unless that is still under way, or
        ``max_threads`` recoveries hang already (then False: a later pass submits
        again). One running for longer than SLOW_RECOVERY seconds is logged once."""
        now = time.monotonic()
        for name, (thread, started) in list(self._threads.items()):
            if not thread.is_alive():
                del self._threads[name]
                self._slow.discard(name)
            elif now - started > SLOW_RECOVERY and name not in self._slow:
                self._slow.add(name)
                log.warning(
                    "pushing the periodic claims of dead process %s has taken %.0fs so far "
                    "(a client middleware that hangs?); the claims wait for it",
                    name,
                    now - started,
                )
        if ident in self._threads or len(self._threads) >= self.max_threads:
            return False
        thread = threading.Thread(
            target=self._run, args=(ident,), name=f"periodic-claims-{ident}", daemon=True
        )
        self._threads[ident] = (thread, now)
        thread.start()
        return True

    @staticmethod
    def _run(ident: str) -> None:
        try:
            recover(connection.get_client(), ident)
        except Exception as exc:  # noqa: BLE001 - the records stay for the next pass
            errors.report("Periodic claim recovery", exc, f"claims of {ident}")
        else:
            errors.recovered("Periodic claim recovery")


def pending(conn: Any, ident: str) -> int:
    """How many claim records ``ident`` still has (recovery forgets it only at 0)."""
    return int(conn.hlen(keys.periodic_claims(ident)))
