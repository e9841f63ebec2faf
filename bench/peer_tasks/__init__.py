"""Task definitions the peers' worker subprocesses import (each a true no-op).

Each module reads its Redis target from the same environment as the bench process
(``BENCH_REDIS_URL``, ``BENCH_DB_BASE``), through ``bench.targets``.
"""
