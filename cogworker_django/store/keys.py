"""Every Redis key name, one function each (the data model: docs/internals.md).

All keys live under ``COGWORKER["PREFIX"]`` (``P`` below), so two prefixes on one
Redis never see each other's keys. Nothing else in the package builds a key name.

Homes. Keys live in *homes*: the prefix's own (:func:`root`) and, on a Redis Cluster,
one per queue. What one Lua script touches is always in one home, so in one hash slot:

- with ``COGWORKER["CLUSTER"]`` off there is one home, ``P``, and the names are exactly
  what they always were (an upgrade must not orphan jobs in flight: tests/store/test_cluster.py
  pins every one);
- with it on and a PREFIX without braces (:func:`spread`), the prefix's home is ``{P}``
  and each queue ``q`` has its own, ``{P|q}``: the queue list, its priority zset, and the
  paused, schedule, retry, dead and unsettled sets and the in-progress lists of the jobs
  of that home's queues. Queues then hash to different slots, so to different masters;
- with it on and a PREFIX that holds a tag itself (``{P}`` or ``app:{P}``), every key
  is in that one tag's home: one slot, the user's choice (docs/cluster.md).

Functions that take ``home`` are per-home keys; callers get the home from
:func:`home_of` (a queue's) or from ``homes.py`` (every home, for listings and
chores). The key guard reads :func:`fixed_types` and :func:`home_types` for what type
each key must hold.
"""

from __future__ import annotations

import re

from .. import conf


def prefix() -> str:
    return conf.get().PREFIX


def root() -> str:
    """What every key name starts with: the prefix, or its hash tag in cluster mode."""
    s = conf.get()
    return hash_tag(s.PREFIX) if s.CLUSTER else s.PREFIX


def spread() -> bool:
    """Each queue in its own home (a Redis Cluster and a PREFIX without a tag of its own)."""
    s = conf.get()
    return bool(s.CLUSTER) and "{" not in s.PREFIX


def home_of(queue: str) -> str:
    """The home of ``queue``'s keys: ``{P|queue}`` when :func:`spread`, else :func:`root`
    (conf forbids ``|`` in such a PREFIX, so no two queues share a home by accident)."""
    if not spread():
        return root()
    # Redis hashes up to the first "}": a queue "a}b" is in queue "a"'s slot, so its home.
    return "{" + prefix() + "|" + queue.split("}", 1)[0] + "}"


def home_part(key: str) -> str:
    """The home a key name belongs to: its leading hash tag, or the root (the one home
    off a cluster)."""
    if key.startswith("{"):
        end = key.find("}")
        if end > 0:
            return key[: end + 1]
    return root()


def hash_tag(name: str) -> str:
    """``name`` as a hash tag, ``{name}``; a name that already holds one is kept (conf
    allows only one well-formed tag in a cluster PREFIX)."""
    return name if "{" in name else "{" + name + "}"


def _k(*parts: str) -> str:
    return ":".join((root(), *parts))


def _h(home: str, *parts: str) -> str:
    return ":".join((home, *parts))


# Fixed keys -------------------------------------------------------------------------------


def queues() -> str:  # set: known queue names (listing only)
    return _k("queues")


def paused(home: str) -> str:  # set: paused queues (per home)
    return _h(home, "paused")


def schedule(home: str) -> str:  # zset: run at (per home)
    return _h(home, "schedule")


def retry(home: str) -> str:  # zset: retry at (per home)
    return _h(home, "retry")


def dead(home: str) -> str:  # zset: failed at (per home)
    return _h(home, "dead")


def processes() -> str:  # set: worker identities
    return _k("processes")


def inprogress_ids() -> str:  # set: identities that may own an in-progress list
    return _k("inprogress_ids")


def last_beat() -> str:  # hash: identity -> last beat (Redis clock)
    return _k("last_beat")


def live_queues() -> str:  # zset: queue -> last time a process read it
    return _k("live_queues")


def outbox() -> str:  # list: jobs on their way to another home (outbox.py)
    return _k("outbox")


def unsettled(home: str) -> str:  # list: finished jobs a stopping process could not file
    return _h(home, "unsettled")


def periodic_schedule() -> str:  # hash: entry name -> entry JSON
    return _k("periodic", "schedule")


def periodic_disabled() -> str:  # set: disabled entry names
    return _k("periodic", "disabled")


def periodic_claimers() -> str:  # set: identities that may hold periodic claim records
    return _k("periodic", "claimers")


def periodic_version() -> str:  # string: counter bumped by every change of a database entry
    return _k("periodic", "version")


def history() -> str:  # stream: run records
    return _k("history")


def stat(name: str, day: str | None = None) -> str:  # string counters: processed / failed
    return _k("stat", name, day) if day else _k("stat", name)


def batches() -> str:  # zset: batch id -> last activity (workflows)
    return _k("batches")


def cancels() -> str:  # zset: jid -> when api.cancel flagged it while running
    return _k("cancels")


# Per-queue, per-process, per-entry keys -----------------------------------------------------


def queue(name: str) -> str:  # list (in the queue's home)
    return _h(home_of(name), "queue", name)


def priority_queue(name: str) -> str:  # zset: the queue's jobs with a priority (priority.py)
    return _h(home_of(name), "pqueue", name)


def process(identity: str) -> str:  # hash: presence
    return _k("process", identity)


def work(identity: str) -> str:  # hash: thread -> running job
    return _k("work", identity)


def inprogress(identity: str, home: str) -> str:  # list: reliable fetch (per home)
    return _h(home, "inprogress", identity)


def inprogress_homes(identity: str) -> str:  # set: homes of a process's lists (spread only)
    return _k("inprogress_homes", identity)


def relayed(job_id: str, home: str) -> str:  # string: this outbox entry was pushed here
    # (an envelope's id, outbox.py; or a durable row's jid, durable/relay.py)
    return _h(home, "relayed", job_id)


def durable_relay_lock(alias: str) -> str:  # string: the relay of a SQLite outbox (owner)
    return _k("durable", "relaying", alias)


def signal(identity: str) -> str:  # pub/sub channel
    return _k("signal", identity)


def unique(digest: str, home: str) -> str:  # string: owner jid (in its job's queue's home)
    return _h(home, "unique", digest)


def periodic_last_slot(name: str) -> str:  # string: epoch
    return _k("periodic", "last_slot", name)


def periodic_lock(name: str, slot: int) -> str:  # string: per-slot NX lock
    return _k("periodic", "lock", name, str(slot))


def periodic_running(name: str) -> str:  # string: owner jid
    return _k("periodic", "running", name)


def periodic_claims(identity: str) -> str:  # hash: "<slot>:<name>" -> claim not yet pushed
    return _k("periodic", "claims", identity)


def result(
    task_id: str,
) -> str:  # hash: a job's kept outcome and progress, or a django.tasks result
    return _k("result", task_id)


def result_ended(jid: str) -> str:  # list: wakes the callers of result() blocked on jid
    return _k("ended", jid)


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


def limit_waiting(name: str) -> str:  # zset: a refused job's scheduled payload -> when parked
    return _k("limit", name, "waiting")


def limit_offered(name: str) -> str:  # zset: jid of a waiting job moved to its queue -> when
    return _k("limit", name, "offered")


def limit_keys(name: str) -> dict[str, str]:
    """Key -> Redis TYPE of every key of one limiter."""
    return {
        limit_leases(name): "zset",
        limit_starts(name): "zset",
        limit_waiting(name): "zset",
        limit_offered(name): "zset",
    }


def quarantine_prefix(key: str) -> str:
    """Copies of ``key`` are ``<this><ms>:<rand>``, in the key's own home (a rename stays
    in its slot)."""
    return _h(home_part(key), "quarantine", key) + ":"


def quarantine(key: str, ms: int, rand: str) -> str:
    return f"{quarantine_prefix(key)}{ms}:{rand}"


def quarantine_root(home: str) -> str:
    """Every quarantined copy of a key of ``home`` starts with this (``P:quarantine:``)."""
    return _h(home, "quarantine") + ":"


def is_quarantined(name: str) -> bool:
    """A quarantined copy's name, in any home of this prefix."""
    return name.startswith(quarantine_root(home_part(name))) and _ours(home_part(name))


def _ours(home: str) -> bool:
    return home == root() or (spread() and home.startswith("{" + prefix() + "|"))


def glob_escape(text: str) -> str:
    """``text`` as a SCAN glob that matches it literally."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def queue_of_home(home: str) -> str:
    """The queue whose home ``home`` is (``{P|q}`` is queue ``q``'s), or "" for the
    prefix's own home (no queue's)."""
    start = "{" + prefix() + "|"
    return home[len(start) : -1] if spread() and home.startswith(start) else ""


def quarantine_patterns() -> list[str]:
    """SCAN globs that together match every quarantined copy of this prefix, in every
    home: the prefix's, and with a home per queue every ``{P|q}``."""
    patterns = [glob_escape(quarantine_root(root())) + "*"]
    if spread():
        patterns.append("{" + glob_escape(prefix()) + "|*}:quarantine:*")
    return patterns


def home_types(home: str) -> dict[str, str]:
    """Key -> Redis TYPE for every fixed key of one home."""
    return {
        paused(home): "set",
        schedule(home): "zset",
        retry(home): "zset",
        dead(home): "zset",
        unsettled(home): "list",
    }


def fixed_types() -> dict[str, str]:
    """Key -> Redis TYPE for every fixed key of the prefix's home (the key guard's list;
    with one home, that home's per-home keys too)."""
    types = {} if spread() else home_types(root())
    return types | {
        queues(): "set",
        processes(): "set",
        inprogress_ids(): "set",
        last_beat(): "hash",
        live_queues(): "zset",
        outbox(): "list",
        periodic_schedule(): "hash",
        periodic_disabled(): "set",
        periodic_claimers(): "set",
        periodic_version(): "string",
        history(): "stream",
        stat("processed"): "string",
        stat("failed"): "string",
        batches(): "zset",
        cancels(): "zset",
    }
