"""The producer: a mix of jobs, pushed through the public API from this process.

Every enqueue is recorded: what was asked, the jid Redis accepted (None for a refused
duplicate of a unique job), or the error (then the push may or may not have happened:
the checker matches such a record to a run by its token, or by kind and key).
"""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

UNIQUE_KEYS = 4  # unique jobs of one mode share this few digests, so duplicates happen


@dataclass
class Enqueued:
    kind: str  # the traced kind the run will have
    t: float
    token: str | None = None
    key: int | None = None
    jid: str | None = None
    status: str = "accepted"  # "accepted", "duplicate", "error"
    error: str = ""
    expected_runs: int = 1
    how: str = ""  # plain, many, scheduled, priority, deferred, ...


@dataclass
class Producer:
    rng: random.Random
    ends_at: float
    records: list[Enqueued] = field(default_factory=list)
    error: BaseException | None = None
    _n: int = 0
    _stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        from soakapp import jobs  # noqa: F401 - import errors surface here, not in the thread

        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(60)

    def _token(self) -> str:
        self._n += 1
        return f"t{self._n}"

    def _run(self) -> None:
        try:
            while not self._stopping.is_set() and time.time() < self.ends_at:
                self.one()
                self._stopping.wait(self.rng.uniform(0.05, 0.35))
        except BaseException as exc:  # noqa: BLE001 - reported by the soak
            self.error = exc

    def one(self) -> None:
        kinds = [
            (self._plain, 30),
            (self._many, 4),
            (self._scheduled, 10),
            (self._slow, 6),
            (self._flaky, 8),
            (self._unique, 24),
            (self._task, 10),
            (self._deferred_task, 3),
        ]
        fn = self.rng.choices([k for k, _ in kinds], weights=[w for _, w in kinds])[0]
        fn()

    def _record(self, rec: Enqueued, push) -> None:
        try:
            jid = push()
        except Exception as exc:  # noqa: BLE001 - an outage under chaos: recorded
            rec.status = "error"
            rec.error = f"{type(exc).__name__}: {exc}"[:200]
        else:
            rec.jid = jid
            rec.status = "accepted" if jid else "duplicate"
        self.records.append(rec)

    # The mix ------------------------------------------------------------------------------

    def _plain(self) -> None:
        from soakapp import jobs

        token = self._token()
        queue = self.rng.choice(["critical", "default", "low"])
        if self.rng.random() < 0.2:
            rec = Enqueued("plain_async", time.time(), token=token, how="async")
            self._record(rec, lambda: jobs.plain_async.using(queue=queue).enqueue(token))
        else:
            rec = Enqueued("plain", time.time(), token=token, how=f"plain:{queue}")
            self._record(rec, lambda: jobs.plain.using(queue=queue).enqueue(token))

    def _many(self) -> None:
        from soakapp import jobs

        tokens = [self._token() for _ in range(5)]
        now = time.time()
        recs = [Enqueued("plain", now, token=t, how="many") for t in tokens]
        try:
            jids = jobs.plain.enqueue_many([(t,) for t in tokens])
        except Exception as exc:  # noqa: BLE001
            pushed = getattr(exc, "results", None)  # BulkPushError: which went through
            for i, rec in enumerate(recs):
                jid = pushed[i] if isinstance(pushed, list) and i < len(pushed) else None
                if jid:
                    rec.jid = jid
                else:
                    rec.status = "error"
                    rec.error = f"{type(exc).__name__}: {exc}"[:200]
        else:
            for rec, jid in zip(recs, jids, strict=True):
                rec.jid = jid
                rec.status = "accepted" if jid else "duplicate"
        self.records.extend(recs)

    def _scheduled(self) -> None:
        from soakapp import jobs

        token = self._token()
        delay = self.rng.uniform(1.0, 8.0)
        rec = Enqueued("plain", time.time(), token=token, how="scheduled")
        self._record(rec, lambda: jobs.plain.enqueue_in(delay, token))

    def _slow(self) -> None:
        from soakapp import jobs

        token = self._token()
        seconds = round(self.rng.uniform(2.0, 8.0), 2)
        rec = Enqueued("slow", time.time(), token=token, how="slow")
        self._record(rec, lambda: jobs.slow.using(queue="low").enqueue(token, seconds))

    def _flaky(self) -> None:
        from soakapp import jobs

        token = self._token()
        fails = self.rng.choice([1, 2])
        rec = Enqueued("flaky", time.time(), token=token, expected_runs=fails + 1, how="flaky")
        self._record(rec, lambda: jobs.flaky.enqueue(token, fails))

    def _unique(self) -> None:
        from soakapp import jobs

        mode = self.rng.choice(["until_executed", "until_started", "while_executing"])
        key = self.rng.randrange(UNIQUE_KEYS)
        fn = getattr(jobs, f"unique_{mode}")
        rec = Enqueued(f"unique_{mode}", time.time(), key=key, how=mode)
        self._record(rec, lambda: fn.enqueue(key))

    def _task(self) -> None:
        from soakapp import tasks

        token = self._token()
        priority = self.rng.randint(-100, 100)
        queue = self.rng.choice(["default", "low"])
        rec = Enqueued("task", time.time(), token=token, how="priority")
        self._record(
            rec,
            lambda: tasks.prioritised.using(priority=priority, queue_name=queue).enqueue(token).id,
        )

    def _deferred_task(self) -> None:
        from django.utils import timezone
        from soakapp import tasks

        token = self._token()
        when = timezone.now() + dt.timedelta(seconds=self.rng.uniform(1.0, 6.0))
        rec = Enqueued("task", time.time(), token=token, how="deferred")
        self._record(rec, lambda: tasks.prioritised.using(run_after=when).enqueue(token).id)

    def summary(self) -> dict[str, Any]:
        out: dict[str, int] = {}
        for r in self.records:
            out[r.status] = out.get(r.status, 0) + 1
        return out
