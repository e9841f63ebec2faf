"""What a run, the middleware chain's async side and the loop watch need of the loop's
owner (:class:`worker.aio.AsyncSide`), as a protocol: they are built by it and call back
into it, so naming the class itself would tie the four modules in a circle."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from .ledger import Ledger


class Side(Protocol):
    loop: asyncio.AbstractEventLoop
    executor: ThreadPoolExecutor
    ledger: Ledger
    strategy: Any
    watchdog: Any
    chain: Any
    runs: dict[int, Any]  # running now, by slot (the loop thread's)

    def free_threadsafe(self, run: Any) -> None: ...
