"""Every Redis key name, one function each (the data model: docs/internals.md).

All keys live under ``COGWORKER["PREFIX"]`` (``P`` below), so two prefixes on one
Redis never see each other's keys. Nothing else in the package builds a key name.

With ``COGWORKER["CLUSTER"]`` on, the root of every name is the prefix as a Redis
Cluster hash tag, ``{P}`` (a PREFIX that already holds one, ``{P}`` or ``app:{P}``, is
used as given): every key hashes to one slot, so each Lua script, MULTI and multi-key
command touches one slot, as Redis Cluster requires (docs/cluster.md says why one tag
and not one per queue). With it off the names are exactly what they always were (an
upgrade must not orphan jobs in flight: tests/test_cluster.py pins every one).

The key guard reads :func:`fixed_types` (and knows the types of the per-queue,
per-process and per-entry keys) for what type each key must hold.
"""

from __future__ import annotations

from . import conf


def prefix() -> str:
    return conf.get().PREFIX


def root() -> str:
    """What every key name starts with: the prefix, or its hash tag in cluster mode."""
    s = conf.get()
    return hash_tag(s.PREFIX) if s.CLUSTER else s.PREFIX


def hash_tag(name: str) -> str:
    """``name`` as a hash tag, ``{name}``; a name that already holds one is kept (conf
    allows only one well-formed tag in a cluster PREFIX)."""
    return name if "{" in name else "{" + name + "}"


def _k(*parts: str) -> str:
    return ":".join((root(), *parts))


# Fixed keys -------------------------------------------------------------------------------


def queues() -> str:  # set: known queue names (listing only)
    return _k("queues")


def paused() -> str:  # set: paused queues
    return _k("paused")


def schedule() -> str:  # zset: run at
    return _k("schedule")


def retry() -> str:  # zset: retry at
    return _k("retry")


def dead() -> str:  # zset: failed at
    return _k("dead")


def processes() -> str:  # set: worker identities
    return _k("processes")


def inprogress_ids() -> str:  # set: identities that may own an in-progress list
    return _k("inprogress_ids")


def last_beat() -> str:  # hash: identity -> last beat (Redis clock)
    return _k("last_beat")


def live_queues() -> str:  # zset: queue -> last time a process read it
    return _k("live_queues")


def unsettled() -> str:  # list: finished jobs a stopping process could not file
    return _k("unsettled")


def periodic_schedule() -> str:  # hash: entry name -> entry JSON
    return _k("periodic", "schedule")


def periodic_disabled() -> str:  # set: disabled entry names
    return _k("periodic", "disabled")


def periodic_claimers() -> str:  # set: identities that may hold periodic claim records
    return _k("periodic", "claimers")


def history() -> str:  # stream: run records
    return _k("history")


def stat(name: str, day: str | None = None) -> str:  # string counters: processed / failed
    return _k("stat", name, day) if day else _k("stat", name)


def batches() -> str:  # zset: batch id -> last activity (workflows)
    return _k("batches")


def cancels() -> str:  # zset: jid -> when api.cancel flagged it while running
    return _k("cancels")


# Per-queue, per-process, per-entry keys -----------------------------------------------------


def queue(name: str) -> str:  # list
    return _k("queue", name)


def priority_queue(name: str) -> str:  # zset: the queue's jobs with a priority (priority.py)
    return _k("pqueue", name)


def process(identity: str) -> str:  # hash: presence
    return _k("process", identity)


def work(identity: str) -> str:  # hash: thread -> running job
    return _k("work", identity)


def inprogress(identity: str) -> str:  # list: reliable fetch
    return _k("inprogress", identity)


def signal(identity: str) -> str:  # pub/sub channel
    return _k("signal", identity)


def unique(digest: str) -> str:  # string: owner jid
    return _k("unique", digest)


def periodic_last_slot(name: str) -> str:  # string: epoch
    return _k("periodic", "last_slot", name)


def periodic_lock(name: str, slot: int) -> str:  # string: per-slot NX lock
    return _k("periodic", "lock", name, str(slot))


def periodic_running(name: str) -> str:  # string: owner jid
    return _k("periodic", "running", name)


def periodic_claims(identity: str) -> str:  # hash: "<slot>:<name>" -> claim not yet pushed
    return _k("periodic", "claims", identity)


def result(task_id: str) -> str:  # hash: django.tasks result
    return _k("result", task_id)


def batch(bid: str) -> str:  # hash: a batch's description, counters, callbacks, state
    return _k("batch", bid)


def batch_pending(bid: str) -> str:  # set: member jids that have not succeeded yet
    return _k("batch", bid, "pending")


def batch_waiting(bid: str) -> str:  # set: member jids with no outcome yet (no run ended)
    return _k("batch", bid, "waiting")


def batch_failed(bid: str) -> str:  # hash: jid -> JSON of its last failure (until it succeeds)
    return _k("batch", bid, "failed")


def batch_jids(bid: str) -> str:  # list: every member jid, in the order they were added
    return _k("batch", bid, "jids")


def batch_results(bid: str) -> str:  # hash: jid -> JSON text of its return value
    return _k("batch", bid, "results")


def batch_keys(bid: str) -> dict[str, str]:
    """Key -> Redis TYPE of every key of one batch."""
    return {
        batch(bid): "hash",
        batch_pending(bid): "set",
        batch_waiting(bid): "set",
        batch_failed(bid): "hash",
        batch_jids(bid): "list",
        batch_results(bid): "hash",
    }


def limit_leases(name: str) -> str:  # zset: concurrency lease -> when it lapses
    return _k("limit", name, "leases")


def limit_starts(name: str) -> str:  # zset: start token -> its time (rate window)
    return _k("limit", name, "starts")


def limit_keys(name: str) -> dict[str, str]:
    """Key -> Redis TYPE of every key of one limiter."""
    return {limit_leases(name): "zset", limit_starts(name): "zset"}


def quarantine_prefix(key: str) -> str:
    """Copies of ``key`` are ``<this><ms>:<rand>``."""
    return _k("quarantine", key) + ":"


def quarantine(key: str, ms: int, rand: str) -> str:
    return f"{quarantine_prefix(key)}{ms}:{rand}"


def quarantine_root() -> str:
    """Every quarantined copy's name starts with this (``P:quarantine:``)."""
    return _k("quarantine") + ":"


def fixed_types() -> dict[str, str]:
    """Key -> Redis TYPE for every fixed key (the key guard's list)."""
    return {
        queues(): "set",
        paused(): "set",
        schedule(): "zset",
        retry(): "zset",
        dead(): "zset",
        processes(): "set",
        inprogress_ids(): "set",
        last_beat(): "hash",
        live_queues(): "zset",
        unsettled(): "list",
        periodic_schedule(): "hash",
        periodic_disabled(): "set",
        periodic_claimers(): "set",
        history(): "stream",
        stat("processed"): "string",
        stat("failed"): "string",
        batches(): "zset",
        cancels(): "zset",
    }
