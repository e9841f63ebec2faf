"""What a run, the middleware chain's async side and the loop watch need of the loop's
owner (:class:`worker.aio.AsyncSide`), as a protocol: they are built by it and call back
into it, so naming the class itself would tie the four modules in a circle."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

from .ledger import Ledger

if TYPE_CHECKING:
    from .aio_run import AsyncRun
    from .jobsource import Settles
    from .processor import RunChain
    from .timeouts import Watchdog


class Side(Protocol):
    loop: asyncio.AbstractEventLoop
    executor: ThreadPoolExecutor
    ledger: Ledger
    strategy: Settles
    watchdog: Watchdog
    chain: RunChain
    runs: dict[int, AsyncRun]  # running now, by slot (the loop thread's)

    def free_threadsafe(self, run: AsyncRun) -> None: ...
