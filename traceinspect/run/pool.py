"""Process pools, made here only: decoding pieces, whole ranks, and a big rank's analyses all use ``process_pool``.

Decoding and analysis are CPU-bound Python, so processes, not threads. ``fork`` keeps start-up cheap (workers share
the parent's imports and, for a big rank's analyses, its events copy-on-write); elsewhere the platform default.

Workers die with their parent. On Linux the kernel kills each one when the parent dies, however it dies (SIGKILL
included: ``prctl(PR_SET_PDEATHSIG)``); everywhere a thread in each worker checks its parent once a second and
ends the worker when the parent is gone. A pool left by an exception (SIGTERM, which the CLI turns into one, or
Ctrl-C) kills its workers at once instead of waiting for their tasks, so no work goes on and no cache entry is
written after the parent stopped. (The kernel's signal follows the thread that started a worker: a pool here lives
within one call of the thread that made it.)
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Iterator

from ..config import RunOptions

#: How often a worker checks that its parent is alive (the portable fallback to PR_SET_PDEATHSIG).
PARENT_POLL_S = 1.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def cpu_count() -> int:
    """The cores this process may run on (its CPU affinity where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_count(options: RunOptions) -> int:
    """``RunOptions.workers``, 0 meaning one per core; never more than the cores (more processes only compete)."""
    return min(options.workers, cpu_count()) if options.workers > 0 else cpu_count()


def can_fork() -> bool:
    """Forking is possible here (not on Windows/macOS spawn-only builds, not inside a daemonic worker)."""
    return "fork" in mp.get_all_start_methods() and not mp.current_process().daemon


def _die_with_parent(parent_pid: int) -> None:
    """A worker's initializer: end this process when ``parent_pid`` ends."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watchdog below still ends it
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    # The parent handles Ctrl-C and SIGTERM (and then kills its workers); a fork inherited its handlers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def watch() -> None:
        while True:
            time.sleep(PARENT_POLL_S)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="traceinspect-parent-watch", daemon=True).start()


class WorkerPool(ProcessPoolExecutor):
    """A ``ProcessPoolExecutor`` whose workers die with the parent, and which, left by an exception, kills them
    instead of waiting for their tasks."""

    def __init__(self, max_workers: int, mp_context=None):
        super().__init__(max_workers=max_workers, mp_context=mp_context, initializer=_die_with_parent,
                         initargs=(os.getpid(),))

    def terminate(self) -> None:
        """Kill the workers now; pending tasks are cancelled."""
        for p in list((getattr(self, "_processes", None) or {}).values()):
            try:
                p.kill()
            except (OSError, AttributeError, ValueError):
                pass
        self.shutdown(wait=False, cancel_futures=True)

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and not issubclass(exc_type, Exception):  # SIGTERM, Ctrl-C, exit: stop at once
            self.terminate()
            return False
        return super().__exit__(exc_type, exc, tb)


def process_pool(n: int, fork_only: bool = False) -> WorkerPool:
    """A pool of ``n`` worker processes; ``fork_only`` for work that relies on memory inherited from the parent."""
    if fork_only or "fork" in mp.get_all_start_methods():
        return WorkerPool(n, mp_context=mp.get_context("fork"))
    return WorkerPool(n)


# NumPy asks Linux for 2 MB pages (madvise) for every array of 4 MB or more. An analysis makes many such arrays that
# live for milliseconds, and a 2 MB page is zeroed whole when first touched: on a 1 GB trace the report took 0.4 to
# 0.8 s longer with them (8.6-9.2 s against 7.9-8.5 s, three runs each on 2 cores). The user's own choice
# (``NUMPY_MADVISE_HUGEPAGE`` set) is left alone.
HUGEPAGE_ENV = "NUMPY_MADVISE_HUGEPAGE"


@contextmanager
def ordinary_pages() -> Iterator[None]:
    """Within the block, NumPy's new arrays (and those of workers forked in it) take ordinary pages; NumPy's
    setting is put back after it, so a program that runs a report keeps its own."""
    import numpy as np

    setter = getattr(getattr(getattr(np, "_core", None), "multiarray", None), "_set_madvise_hugepage", None)
    if setter is None or HUGEPAGE_ENV in os.environ:  # another NumPy, or the user chose
        yield
        return
    before = setter(False)
    try:
        yield
    finally:
        setter(before)
