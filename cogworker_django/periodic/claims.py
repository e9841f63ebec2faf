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

Push paths that can't remove the record in their own step (a unique job's lock script,
a django.tasks priority zset, a test-mode sink) first mark it ``"p <jid>"``
(lua/periodic_mark.lua); a marked record is never pushed again (its push may have
happened): at most once, as before records existed, for those paths only.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from .. import client, connection, errors, keys, payload, scripts

log = logging.getLogger("cogworker_django")

CLAIMED = "c"
PUSHING = "p"

# (identity, field) of recovered claims whose push failed deterministically: logged once.
_failing: set[tuple[str, str]] = set()


def field(name: str, slot: int) -> str:
    """A claim's field in its claimer's hash (a name may hold ':'; the slot comes first)."""
    return f"{slot}:{name}"


def record(job: dict[str, Any]) -> str:
    """The record the claim script stores for ``job`` (built here, not in Lua: rule 3)."""
    return f"{CLAIMED} {job['jid']} {payload.encode(job)}"


class ClaimedPush:
    """The final write of one claimed slot's job, for :func:`cogworker_django.client.push`:
    ``plain`` replaces the LPUSH of the plain path (push and remove the record in one
    step); ``other`` is called before any other path (marks the record). ``reached`` says
    whether the push got past the client middleware; ``gone`` that the record was not
    there any more (pushed already, or taken over), so nothing was pushed."""

    def __init__(self, conn: Any, owner: str, field: str, jid: str) -> None:
        self.conn = conn
        self.key = keys.periodic_claims(owner)
        self.field = field
        self.jid = jid
        self.reached = False
        self.gone = False
        self.marked = False

    def plain(self, queue: str, data: str) -> bool:
        self.reached = True
        pushed = scripts.run(
            "periodic_push",
            self.conn,
            [self.key, keys.queue(queue), keys.queues()],
            [self.field, self.jid, data, queue],
        )
        self.gone = int(pushed) == 0
        return not self.gone

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
        # Refused, or pushed by a path that left the record marked: drop it (a record
        # left behind by a failed drop is marked or refused; recovery then drops it too,
        # unless the refusal came before the mark, when recovery asks the middleware
        # again).
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
    """Runs :func:`recover` for orphan recovery on a thread of its own, one at a time:
    recovering a claim runs the client middleware (user code), and a middleware that
    hangs must hold up only these pushes, never the poller that recovery runs on
    (scheduled jobs and retries would stop moving). A hung push holds its record;
    nothing is lost, and the next submit after it returns picks up what is left."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None

    def submit(self, ident: str) -> bool:
        """Start recovering ``ident``'s claims unless a recovery is still running (then
        False: the next pass submits again)."""
        if self._thread is not None and self._thread.is_alive():
            return False
        self._thread = threading.Thread(
            target=self._run, args=(ident,), name="periodic-claims", daemon=True
        )
        self._thread.start()
        return True

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

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
