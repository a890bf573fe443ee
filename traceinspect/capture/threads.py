"""CPU time of each thread of the training process over the recorded steps, which the profiler does not record.

The profiler records the threads that run torch ops under it: the training loop and autograd's threads. The
DataLoader's pinning thread (``pin_memory=True`` with workers) receives every batch from the workers, rebuilds its
tensors and copies them into pinned memory, inside the training process, and is not in the trace. In a GPU-bound
step that work hides in the time the loop waits for the GPU; a fix that makes the step CPU-bound brings it onto the
step's path (the threads share the interpreter and the cores). :class:`ThreadClock` reads each thread's time on a
CPU from Linux's ``/proc/self/task/<tid>/schedstat`` at the start of the recording and at its end (the window's last
step), and names the threads (Python's own names where it has them, e.g. ``Thread-3 (_pin_memory_loop)``).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

_TASKS = "/proc/self/task"


def _cpu_ns() -> dict[int, int]:
    """Nanoseconds on a CPU of each live thread of this process (empty where /proc has no schedstat)."""
    out = {}
    try:
        tids = os.listdir(_TASKS)
    except OSError:
        return out
    for t in tids:
        try:
            fd = os.open(f"{_TASKS}/{t}/schedstat", os.O_RDONLY)  # os.read: a third of read_text's cost
            try:
                out[int(t)] = int(os.read(fd, 64).split()[0])
            finally:
                os.close(fd)
        except (OSError, ValueError, IndexError):
            continue
    return out


def _names() -> dict[int, str]:
    names = {}
    for t in threading.enumerate():
        if t.native_id is not None:
            names[t.native_id] = t.name
    return names


def _os_name(tid: int) -> str:
    try:
        return Path(f"{_TASKS}/{tid}/comm").read_text().strip()
    except OSError:
        return "?"


class ThreadClock:
    """Per-thread CPU time of this process from :meth:`start` on (Linux; ``available`` is False elsewhere)."""

    def __init__(self) -> None:
        self.available = bool(_cpu_ns())
        self._t0: dict[int, int] = {}
        self._wall0: float | None = None

    def start(self) -> None:
        self._t0 = _cpu_ns()
        self._wall0 = time.monotonic()

    def stats(self) -> dict[str, Any] | None:
        """Each thread's CPU time since :meth:`start` (threads started since count from 0), most first; the
        loop's own thread is marked ``main``. None before :meth:`start` or where /proc cannot be read."""
        if not self.available or self._wall0 is None:
            return None
        now = _cpu_ns()
        if not now:
            return None
        py = _names()
        main = threading.main_thread().native_id
        threads = []
        for tid, ns in now.items():
            used = ns - self._t0.get(tid, 0)
            if used <= 0:
                continue
            threads.append({"name": py.get(tid) or _os_name(tid), "cpu_us": used / 1e3, "main": tid == main})
        threads.sort(key=lambda r: -r["cpu_us"])
        return {
            "interval_us": (time.monotonic() - self._wall0) * 1e6,
            "threads": threads,
            "method": "each thread's time on a CPU (/proc/self/task/<tid>/schedstat) over the recorded steps",
        }
