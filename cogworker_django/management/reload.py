"""``manage.py cogworker --reload`` (development only): the worker runs in a child
process, and this one restarts it when a Python file of the project changes, as
``runserver`` does.

This process watches; it runs no job. It takes the list of files to watch from Django's
autoreloader (``django.utils.autoreload``: the files of every imported module, after
this process imported the job modules as a worker does), keeps the project's own (not
the interpreter's or site-packages'), and adds every ``.py`` file under the folders of
the project's installed apps, so that a new module (a ``jobs.py`` just written) counts
too. Every second it compares their modification times. On a change it sends the child
TERM, which stops it as any TERM does (running jobs finish within the shutdown timeout
or are handed back to their queues), waits for it to exit, and starts a fresh one,
which imports the code as it is now. A child that exits by itself (a syntax error in a
job module) is started again at the next change.

TERM, INT, TSTP and TTIN sent to this process are passed on to the child; the child is
in a process group of its own, so a terminal's Ctrl-C reaches it once, through here,
and it stops by itself if this process dies (``--reload-parent``).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger("cogworker_django")

# How often the files are looked at (runserver's StatReloader: once a second).
TICK = 1.0
# The hidden option a child is started with: its parent's pid (the child stops if the
# parent goes away, as a --processes child does).
PARENT_OPTION = "--reload-parent"  # (the command declares it: commands/cogworker.py)
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGTSTP, signal.SIGTTIN)


def child_arguments() -> list[str]:
    """How this process was started (Django's autoreloader rebuilds it: ``manage.py``,
    ``python -m django``, ``django-admin``), without ``--reload``, and with the parent's
    pid."""
    from django.utils import autoreload

    args = [a for a in autoreload.get_child_arguments() if a != "--reload"]
    return [*args, f"{PARENT_OPTION}={os.getpid()}"]


def _outside_project() -> tuple[str, ...]:
    """Folders whose files are not the project's: the interpreter's and installed
    packages' (a pip install is not a code change to restart for)."""
    paths = sysconfig.get_paths()
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, paths.get("stdlib", "")}
    found |= {paths.get("purelib", ""), paths.get("platlib", "")}
    return tuple(str(Path(p).resolve()) + os.sep for p in found if p)


def watched_files() -> set[Path]:
    """The project's Python files: every imported module's (after the job modules are
    imported here, as the worker imports them) and every ``.py`` under the project's
    installed apps' folders."""
    from django.utils import autoreload

    from ..core import jobs

    try:
        jobs.import_job_modules()  # their imports are watched too
    except Exception as exc:  # noqa: BLE001 - the child reports it; still watch the rest
        log.debug("--reload: the job modules could not be imported here: %r", exc)
    outside = _outside_project()
    files = {
        Path(f) for f in autoreload.iter_all_python_module_files() if not str(f).startswith(outside)
    }
    return files | app_files()


def app_files() -> set[Path]:
    """Every ``.py`` file under the folders of the project's installed apps (not those
    installed in the interpreter)."""
    from django.apps import apps

    outside = _outside_project()
    files: set[Path] = set()
    for config in apps.get_app_configs():
        folder = str(Path(config.path).resolve())
        if not (folder + os.sep).startswith(outside):
            files.update(Path(folder).rglob("*.py"))
    return files


class Snapshot:
    """Modification times of a set of files, and what changed since."""

    def __init__(self, files: Iterable[Path]) -> None:
        self.times = {p: _mtime(p) for p in files}

    def changed(self, files: Iterable[Path]) -> list[Path]:
        """Of ``files``, those changed, created or removed since this snapshot."""
        return [p for p in files if self.times.get(p) != _mtime(p)]


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


class Reloader:
    """The parent of ``--reload``: starts the worker, restarts it on a change."""

    def __init__(self, args: list[str]) -> None:
        self.args = args
        self.child: subprocess.Popen | None = None
        self.stopping = False

    def run(self) -> int:
        for sig in _FORWARDED:
            signal.signal(sig, self._on_signal)
        files = watched_files()
        snapshot = Snapshot(files)
        log.info(
            "--reload (development only): watching %d Python files of the project; the "
            "worker restarts when one changes",
            len(files),
        )
        self._start()
        code = 0
        while not self.stopping:
            time.sleep(TICK)
            if self.child is not None and self.child.poll() is not None:
                code = self.child.returncode
                if not self.stopping:
                    log.error(
                        "the worker exited with %s; it starts again when a file changes", code
                    )
                self.child = None
            if self.stopping:
                break
            # A new app module (a jobs.py just written) is found by the folders' walk.
            files |= app_files()
            changed = snapshot.changed(files)
            if not changed:
                continue
            log.info(
                "%s changed: restarting the worker (TERM: running jobs finish or are handed back)",
                ", ".join(str(p) for p in changed[:3]) + (" ..." if len(changed) > 3 else ""),
            )
            self._stop_child()
            snapshot = Snapshot(files)
            if not self.stopping:
                self._start()
        return self._stop_child() if self.child is not None else code

    def _start(self) -> None:
        # Its own process group: a terminal's signals reach it through _on_signal only.
        self.child = subprocess.Popen(self.args, process_group=0)

    def _stop_child(self) -> int:
        child = self.child
        if child is None:
            return 0
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
        code = child.wait()
        self.child = None
        return code

    def _on_signal(self, signum: int, _frame: object) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT):
            self.stopping = True
        child = self.child
        if child is not None and child.poll() is None:
            try:
                child.send_signal(signal.SIGTERM if signum == signal.SIGINT else signum)
            except ProcessLookupError:
                pass


def run() -> int:
    return Reloader(child_arguments()).run()
