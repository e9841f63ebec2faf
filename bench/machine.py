"""One line (and a dict for --json) describing where the numbers were taken."""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version

import redis

from bench.targets import base_url, redacted

PACKAGES = ["cogworker-django", "Django", "redis", "rq", "dramatiq", "huey", "celery", "kombu"]


def describe() -> dict:
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "redis_server": _redis_version(),
        "redis_url": redacted(base_url()),
        "packages": {name: _version(name) for name in PACKAGES}
        | {name: _foreign_version(name) for name in FOREIGN},
    }


def line(info: dict) -> str:
    pkgs = ", ".join(f"{k} {v}" for k, v in info["packages"].items() if v)
    missing = [k for k, v in info["packages"].items() if not v]
    text = (
        f"Machine: {info['cpu']}, {info['cores']} cores ({info['usable_cores']} usable), "
        f"load {' '.join(map(str, info['load_avg']))}, {info['os']}; "
        f"Python {info['python']}; Redis {info['redis_server']} at {info['redis_url']}; {pkgs}"
    )
    if missing:
        text += f"; not installed: {', '.join(missing)}"
    return text


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for row in f:
                if row.startswith("model name"):
                    return row.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _redis_version() -> str:
    client = redis.Redis.from_url(base_url())
    try:
        return client.info("server").get("redis_version", "?")
    except redis.RedisError as exc:
        return f"unreachable ({exc})"
    finally:
        client.close()


# The systems in another language: their adapters say which version is installed.
FOREIGN = ["sidekiq", "bullmq"]


def _foreign_version(name: str) -> str | None:
    from bench.systems import load

    try:
        return load(name).version()
    except Exception:  # noqa: BLE001 - not installed or broken: plan() reports which
        return None


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        pass
    if name == "cogworker-django":  # importable from the repo without being pip-installed
        try:
            import cogworker_django

            return str(getattr(cogworker_django, "__version__", "?")) + " (not pip-installed)"
        except ImportError:
            pass
    return None
